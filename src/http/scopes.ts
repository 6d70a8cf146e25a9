import { TuskValidationError } from '../errors.js';

/**
 * What a token may do, on top of whose jobs it sees (its tenant's, or every tenant's):
 *
 * - `enqueue`: add jobs (`POST /api/jobs`, `POST /api/flows`);
 * - `read`: see jobs and its tenant (`GET /api/jobs`, `/api/jobs/:id`, `/api/tenants/:tenant`,
 *   `/api/events`);
 * - `manage`: cancel and retry jobs;
 * - `lease`: lease jobs and complete them (`/api/fetch`, `ack`, `nack`, `extend`);
 * - `metrics`: `GET /metrics` (tokens without a tenant only);
 * - `admin`: everything, tenants, workers and stats included (tokens without a tenant only).
 */
export const SCOPES = ['enqueue', 'read', 'manage', 'lease', 'metrics', 'admin'] as const;
export type Scope = (typeof SCOPES)[number];

/** What a tenant token may do unless told otherwise: everything on its tenant's jobs. */
export const TENANT_SCOPES: readonly Scope[] = ['enqueue', 'read', 'manage', 'lease'];
/** Scopes that reach across tenants, so only a token without a tenant may hold them. */
export const GLOBAL_SCOPES: readonly Scope[] = ['metrics', 'admin'];

const isScope = (s: string): s is Scope => (SCOPES as readonly string[]).includes(s);

/**
 * Scopes from `enqueue+read` or `enqueue,read` (or a list of such), in their canonical
 * order, checked against the tenant: `admin` and `metrics` need a token without one.
 */
export function parseScopes(given: string | readonly string[], tenant: string | null, field = 'scopes'): Scope[] {
  const words = (typeof given === 'string' ? [given] : given).flatMap((s) =>
    typeof s === 'string' ? s.split(/[+,\s]+/).filter(Boolean) : [s],
  );
  if (words.length === 0) throw new TuskValidationError(field, `must name at least one scope of ${SCOPES.join(', ')}`);
  for (const word of words) {
    if (typeof word !== 'string' || !isScope(word)) {
      throw new TuskValidationError(field, `${JSON.stringify(word)} is not a scope: use ${SCOPES.join(', ')}`);
    }
    if (tenant !== null && GLOBAL_SCOPES.includes(word)) {
      throw new TuskValidationError(
        field,
        `${word} reaches every tenant: a token for tenant ${JSON.stringify(tenant)} may have ${TENANT_SCOPES.join(', ')}`,
      );
    }
  }
  return SCOPES.filter((s) => words.includes(s));
}

/** `enqueue+read`: how the CLI and messages write a set of scopes. */
export const formatScopes = (scopes: Iterable<Scope>): string => [...scopes].join('+');
