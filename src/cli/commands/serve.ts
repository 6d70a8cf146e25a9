import type { Command } from 'commander';
import type { PoolClient } from 'pg';
import { requestBounds } from '../../http/requestTimeouts.js';
import { checkSchema } from '../../migrate/migrate.js';
import { intOption, optionError, tuskFor } from '../context.js';
import { runUntilSignal, StopSignal } from '../lifecycle.js';

interface Options {
  port: number;
  host: string;
  dashboard: boolean;
  metricsLagMs?: number;
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
  upkeep: boolean;
}

export function serveCommand(program: Command): void {
  program
    .command('serve')
    .description(
      'HTTP API, dashboard and /metrics. Asks a token when TUSK_ADMIN_TOKEN is set or tokens exist (tusk tokens create); without one it listens on loopback only',
    )
    .option('-p, --port <port>', 'port (0: any free one)', intOption('--port', 0, 65535), 8080)
    .option('--host <host>', 'address to listen on (anything but loopback needs a token)', '127.0.0.1')
    .option('--no-dashboard', 'serve the API and metrics only')
    .option('--no-upkeep', "leave the queue's upkeep (expired leases, due jobs, schedules…) to other processes")
    .option(
      '--metrics-lag-ms <ms>',
      'metrics count events up to this long ago, so that their transactions have committed (default 5000)',
      intOption('--metrics-lag-ms'),
    )
    .option(
      '--headers-timeout-ms <ms>',
      "longest a client may take to send a request's headers: past it, 408 and the connection closed; at most --request-timeout-ms (default 10000, or --request-timeout-ms if less)",
      intOption('--headers-timeout-ms', 1, 3_600_000),
    )
    .option(
      '--request-timeout-ms <ms>',
      'longest a client may take to send a whole request, body included; not the answer: long polls and event streams go on (default 30000)',
      intOption('--request-timeout-ms', 1, 3_600_000),
    )
    .action(async (options: Options, command: Command) => {
      const signal = new StopSignal();
      const tusk = tuskFor(command);
      let close = async () => {};
      let held: PoolClient | undefined;
      try {
        // checked before connecting, with the flags' names
        const { headers, request } = requestBounds(options);
        if (headers > request) {
          const ofRequest = options.requestTimeoutMs === undefined ? `${request}, its default` : `${request}`;
          throw optionError(
            '--headers-timeout-ms',
            `must be at most --request-timeout-ms (${ofRequest}) (got ${headers})`,
          );
        }
        const pool = await tusk.pool();
        await checkSchema(pool, tusk.schema);
        // A shared embedded server is stopped by the last process to leave it, counted by
        // open connections: one held open while serving keeps an idle server counted.
        held = await pool.connect();
        const connection = held;
        // loaded here rather than with the CLI: the other commands do without Hono
        const { createServer } = await import('../../http/server.js');
        const server = await createServer(tusk, {
          dashboard: options.dashboard,
          ...(options.metricsLagMs === undefined ? {} : { metrics: { lagMs: options.metricsLagMs } }),
          ...(options.headersTimeoutMs === undefined ? {} : { headersTimeoutMs: options.headersTimeoutMs }),
          ...(options.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: options.requestTimeoutMs }),
        });
        const listening = await server.listen({ port: options.port, host: options.host });
        // consumers of the HTTP API are not Tusk workers: the server keeps the queue moving
        if (options.upkeep) tusk.upkeep().start();
        close = async () => {
          await listening.close();
          connection.release();
        };
        console.log(`tusk: serving on ${listening.url}`);
      } catch (error) {
        held?.release();
        await tusk.close();
        throw error;
      }
      await runUntilSignal(
        'the server',
        async () => {
          await close();
          await tusk.close();
        },
        signal,
      );
    });
}
