#!/usr/bin/env node
import { Command, CommanderError } from 'commander';
import { TuskError } from '../errors.js';
import { VERSION } from '../version.js';
import { demoCommand } from './commands/demo.js';
import { drainCommand } from './commands/drain.js';
import { enqueueCommand } from './commands/enqueue.js';
import { migrateCommand } from './commands/migrate.js';
import { pruneCommand } from './commands/prune.js';
import { schedulesCommand } from './commands/schedules.js';
import { serveCommand } from './commands/serve.js';
import { statsCommand } from './commands/stats.js';
import { statusCommand } from './commands/status.js';
import { tenantsCommand } from './commands/tenants.js';
import { tokensCommand } from './commands/tokens.js';
import { workerCommand } from './commands/worker.js';

const program = new Command('tusk')
  .description(
    'Tusk: a PostgreSQL job queue. Connects to --database-url, else DATABASE_URL, else an embedded PostgreSQL in ./.tusk/pg.',
  )
  .version(VERSION)
  .option('--database-url <url>', 'PostgreSQL connection string (default: DATABASE_URL, else embedded)')
  .option('--schema <name>', "schema of Tusk's tables (default: TUSK_SCHEMA, else tusk)")
  .showHelpAfterError()
  .exitOverride();

for (const register of [
  migrateCommand,
  workerCommand,
  drainCommand,
  enqueueCommand,
  statusCommand,
  tenantsCommand,
  schedulesCommand,
  pruneCommand,
  statsCommand,
  serveCommand,
  tokensCommand,
  demoCommand,
]) {
  register(program);
}

try {
  await program.parseAsync();
} catch (error) {
  if (error instanceof CommanderError) {
    process.exitCode = error.exitCode;
  } else if (error instanceof TuskError) {
    console.error(`tusk: ${error.message}`);
    process.exitCode = 1;
  } else {
    console.error(error);
    process.exitCode = 1;
  }
}
