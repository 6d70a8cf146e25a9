import { z } from 'zod';
import { VERSION } from '../version.js';
import type { Endpoint } from './endpoint.js';
import { errorSchema, jobIdSchema, tenantParam } from './schemas.js';

const PATH_PARAMS: Record<string, z.ZodType> = { id: jobIdSchema, tenant: tenantParam };

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
      ...(r.contentType ? { content: { [r.contentType]: { schema: { type: 'string' } } } } : {}),
    };
  }
  if (e.access !== 'public') {
    responses[401] = { description: 'no token, or an unknown or revoked one', content: json(errorSchema, 'output') };
  }
  if (e.access === 'admin') {
    responses[403] = { description: 'a tenant token: this needs an admin token', content: json(errorSchema, 'output') };
  }
  return {
    summary: e.summary,
    ...(e.description ? { description: e.description } : {}),
    tags: [e.tag],
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(e.body ? { requestBody: { required: !e.bodyOptional, content: json(e.body, 'input') } } : {}),
    responses,
    security: e.access === 'public' ? [] : [{ bearer: [] }],
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
            'An admin token (TUSK_ADMIN_TOKEN, or `tusk tokens create`) or a tenant token (`tusk tokens create --tenant acme`). Not needed while the server has no token (it then listens on loopback only).',
        },
      },
    },
    paths,
  };
}
