import type { Queryable } from '../db/queryable.js';
import type { TuskMetrics } from '../metrics/metrics.js';
import type { Tusk } from '../tusk.js';
import type { Auth } from './auth.js';
import type { ServerPools } from './pools.js';
import type { ApiTokens } from './tokens.js';

/** What the endpoints work with. */
export interface Api {
  tusk: Tusk;
  db(): Promise<Queryable>;
  /** The server's own pools: lists and searches (with a statement timeout), and leases. */
  pools: ServerPools;
  schema: string;
  tokens: ApiTokens;
  auth: Auth;
  /** null when the server was made without metrics. */
  metrics: TuskMetrics | null;
}
