import { parse } from '../../validation/validate.js';
import type { Api } from '../api.js';
import { type Endpoint, endpoint } from '../endpoint.js';
import { notFound } from '../errors.js';
import { errorSchema, scheduleListSchema, scheduleParam, scheduleRemovedSchema } from '../schemas.js';

/** Schedules: listed and removed (set through the library, the CLI or a crontab file). */
export function scheduleEndpoints(api: Api): Endpoint[] {
  return [
    endpoint({
      method: 'get',
      path: '/api/schedules',
      tag: 'schedules',
      access: 'admin',
      summary: 'Every schedule, by name: cron, time zone, its job, next and last tick, last job',
      responses: { 200: { description: 'the schedules', schema: scheduleListSchema } },
      async handle(c) {
        return c.json({ schedules: await api.tusk.schedules.list() });
      },
    }),
    endpoint({
      method: 'delete',
      path: '/api/schedules/:name',
      tag: 'schedules',
      access: 'admin',
      summary: 'Remove a schedule; its ticks enqueued ahead and not started are cancelled',
      description:
        'A schedule from a crontab file (source crontab) comes back at the next sync unless the file drops it.',
      responses: {
        200: { description: 'removed', schema: scheduleRemovedSchema },
        400: { description: 'a bad name', schema: errorSchema },
        404: { description: 'no schedule of that name', schema: errorSchema },
      },
      async handle(c) {
        const name = parse(scheduleParam, c.req.param('name'), 'name');
        if (!(await api.tusk.schedules.remove(name))) throw notFound('schedule');
        return c.json({ name, removed: true as const });
      },
    }),
  ];
}
