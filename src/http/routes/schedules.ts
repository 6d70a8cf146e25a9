import type { Context } from 'hono';
import { parse } from '../../validation/validate.js';
import type { Api } from '../api.js';
import { type Endpoint, endpoint } from '../endpoint.js';
import type { AppEnv } from '../env.js';
import { notFound } from '../errors.js';
import { errorSchema, scheduleListSchema, scheduleParam, scheduleRemovedSchema, scheduleSchema } from '../schemas.js';

const nameDocs = {
  400: { description: 'a bad name', schema: errorSchema },
  404: { description: 'no schedule of that name', schema: errorSchema },
};

/** The schedule name of `:name`. */
const nameOf = (c: Context<AppEnv>) => parse(scheduleParam, c.req.param('name'), 'name');

/** Schedules: listed, paused, resumed and removed (set through the library, the CLI or a crontab file). */
export function scheduleEndpoints(api: Api): Endpoint[] {
  const pausing = (paused: boolean) =>
    endpoint({
      method: 'post',
      path: `/api/schedules/:name/${paused ? 'pause' : 'resume'}`,
      tag: 'schedules',
      access: 'admin',
      summary: paused
        ? 'Pause a schedule: no tick is enqueued, its ticks enqueued and not started (due ones included) are cancelled'
        : 'Resume a paused schedule at its next tick from now (the ticks of the pause are skipped)',
      responses: { 200: { description: 'the schedule now', schema: scheduleSchema }, ...nameDocs },
      async handle(c) {
        const name = nameOf(c);
        const info = paused ? await api.tusk.schedules.pause(name) : await api.tusk.schedules.resume(name);
        if (!info) throw notFound('schedule');
        return c.json(info);
      },
    });
  return [
    pausing(true),
    pausing(false),
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
      summary: 'Remove a schedule; its ticks enqueued and not started (due ones included) are cancelled',
      description:
        'A schedule from a crontab file (source crontab) comes back at the next sync unless the file drops it.',
      responses: { 200: { description: 'removed', schema: scheduleRemovedSchema }, ...nameDocs },
      async handle(c) {
        const name = nameOf(c);
        if (!(await api.tusk.schedules.remove(name))) throw notFound('schedule');
        return c.json({ name, removed: true as const });
      },
    }),
  ];
}
