import { z } from 'zod';
import { VERSION } from '../version.js';
import type { Endpoint } from './endpoint.js';
import { errorSchema, jobIdSchema, queueParam, scheduleParam, tenantParam } from './schemas.js';

const PATH_PARAMS: Record<string, z.ZodType> = {
  id: jobIdSchema,
  tenant: tenantParam,
  queue: queueParam,
  name: scheduleParam,
};

const RETRY_AFTER = {
  description: 'seconds to wait before asking again',
  schema: { type: 'integer', minimum: 1 },
};

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<string, unknown>;
  return rest;
}

const json = (schema: z.ZodType, io: 'input' | 'output') => ({
  'application/json': { schema: jsonSchema(schema, io) },
});

function operation(e: Endpoint) {
  const parameters: Array<Record<string, unknown>> = [...e.path.matchAll(/:(\w+)/g)].map(([, name = '']) => {
    const schema = PATH_PARAMS[name];
    if (!schema) throw new Error(`openapi: no schema for path parameter :${name} of ${e.path}`);
    return { name, in: 'path', required: true, schema: jsonSchema(schema, 'input') };
  });
  if (e.query instanceof z.ZodObject) {
    for (const [name, field] of Object.entries(e.query.shape as Record<string, z.ZodType>)) {
      const { description, ...schema } = jsonSchema(field, 'input');
      parameters.push({ name, in: 'query', required: !field.safeParse(undefined).success, description, schema });
    }
  }
  const responses: Record<string, unknown> = {};
  for (const [status, r] of Object.entries(e.responses)) {
    responses[status] = {
      description: r.description,
      ...(r.schema ? { content: json(r.schema, 'output') } : {}),
      ...(r.contentType
        ? { content: { [r.contentType]: { schema: { type: r.contentType.includes('json') ? 'object' : 'string' } } } }
        : {}),
    };
  }
  if (e.method !== 'get') {
    responses[415] = { description: 'no Content-Type: application/json', content: json(errorSchema, 'output') };
    responses[413] ??= {
      description: 'a body over its limit (maxBodyBytes; maxBatchBodyBytes for enqueue many)',
      content: json(errorSchema, 'output'),
    };
  }
  if (parameters.some((p) => p.in === 'path')) {
    responses[400] ??= {
      description: 'a bad path parameter, named in the error',
      content: json(errorSchema, 'output'),
    };
  }
  // answered by the HTTP server itself, before any route: no body
  responses[408] ??= {
    description:
      "the request's headers or body not sent in time (headersTimeoutMs, requestTimeoutMs); the connection is closed",
  };
  if (e.access !== 'public') {
    responses[401] = { description: 'no token, or an unknown or revoked one', content: json(errorSchema, 'output') };
    responses[429] ??= {
      description: "over the token's request rate: see Retry-After",
      content: json(errorSchema, 'output'),
    };
    // every 429 says when to ask again: the rate limit's, and those of held requests (CallerLimit)
    responses[429] = { ...(responses[429] as object), headers: { 'Retry-After': RETRY_AFTER } };
    responses[503] ??= {
      description: 'no token is live: the server refuses every request until one is created',
      content: json(errorSchema, 'output'),
    };
  }
  if (e.access !== 'public' && e.access !== 'token') {
    responses[403] = {
      description:
        e.access === 'admin'
          ? 'a token without the admin scope'
          : `a token without the ${e.access} scope (or, for a tenant token, another tenant named)`,
      content: json(errorSchema, 'output'),
    };
  }
  return {
    summary: e.summary,
    ...(e.description ? { description: e.description } : {}),
    tags: [e.tag],
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(e.body ? { requestBody: { required: !e.bodyOptional, content: json(e.body, 'input') } } : {}),
    responses,
    // for http schemes, the list holds the roles needed: here the token's scope
    security: e.access === 'public' ? [] : [{ bearer: e.access === 'token' ? [] : [e.access] }],
  };
}

/** The OpenAPI 3.1 document of the endpoints, made of the schemas the server validates with. */
export function openApiDocument(endpoints: Endpoint[]): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const e of endpoints) {
    const path = e.path.replace(/:(\w+)/g, '{$1}');
    paths[path] ??= {};
    paths[path][e.method] = operation(e);
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Tusk',
      version: VERSION,
      description:
        'Jobs in PostgreSQL over HTTP: enqueue and follow jobs, lease them to workers anywhere, manage tenants, monitor. Errors are { error: { code, message, field? } }.',
    },
    components: {
      securitySchemes: {
        bearer: {
          type: 'http',
          scheme: 'bearer',
          description:
            'An admin token (TUSK_ADMIN_TOKEN, or `tusk tokens create`), or a token with scopes, of one tenant or every one (`tusk tokens create --tenant acme --scope enqueue+read`). Each operation lists the scope it needs; admin has every one. Not needed by a server without auth (it then answers on loopback only).',
        },
      },
    },
    paths,
  };
}
