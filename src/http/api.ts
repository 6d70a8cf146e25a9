import type { Queryable } from '../db/queryable.js';
import type { TuskMetrics } from '../metrics/metrics.js';
import type { Tusk } from '../tusk.js';
import type { Auth } from './auth.js';
import type { ApiTokens } from './tokens.js';

/** What the endpoints work with. */
export interface Api {
  tusk: Tusk;
  db(): Promise<Queryable>;
  schema: string;
  tokens: ApiTokens;
  auth: Auth;
  /** null when the server was made without metrics. */
  metrics: TuskMetrics | null;
}
