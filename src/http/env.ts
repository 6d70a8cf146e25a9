import type { Principal } from './tokens.js';

/** Hono's typing of the app: what middleware leaves on the context. */
export interface AppEnv {
  Variables: { principal: Principal };
}
