import type { Context } from 'hono';
import type { z } from 'zod';
import type { Access } from './auth.js';
import type { AppEnv } from './env.js';

/** One documented response of an endpoint. */
export interface ResponseDoc {
  description: string;
  /** JSON body; none for a text body. */
  schema?: z.ZodType;
  /** Content type of a non-JSON body. */
  contentType?: string;
}

/**
 * An endpoint of the API: its route, who may call it, what it takes and gives (zod
 * schemas: the server validates with them and the OpenAPI document is made of them),
 * and its handler. Query and body arrive parsed.
 */
export interface Endpoint<Q extends z.ZodType = z.ZodType, B extends z.ZodType = z.ZodType> {
  method: 'get' | 'post' | 'patch' | 'delete';
  /** Hono path: `/api/jobs/:id`. */
  path: string;
  summary: string;
  description?: string;
  tag: string;
  access: Access;
  query?: Q;
  body?: B;
  /** The body may be left out (then it is `{}`). */
  bodyOptional?: boolean;
  /** The body may be enqueue many (`{ jobs: [...] }`): its own, larger limit. */
  batchBody?: boolean;
  /** Parses the body instead of `body` (which then only documents it). */
  parseBody?: (value: unknown) => z.output<B>;
  responses: Record<number, ResponseDoc>;
  handle(c: Context<AppEnv>, input: { query: z.output<Q>; body: z.output<B> }): Promise<Response> | Response;
}

/** Declares an endpoint with its handler's input typed by its schemas. */
export const endpoint = <Q extends z.ZodType = z.ZodNever, B extends z.ZodType = z.ZodNever>(
  e: Endpoint<Q, B>,
): Endpoint => e as unknown as Endpoint;
