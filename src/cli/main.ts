#!/usr/bin/env node
import { Command, CommanderError } from 'commander';
import { TuskError } from '../errors.js';
import { VERSION } from '../version.js';
import { demoCommand } from './commands/demo.js';
import { drainCommand } from './commands/drain.js';
import { enqueueCommand } from './commands/enqueue.js';
import { migrateCommand } from './commands/migrate.js';
import { pruneCommand } from './commands/prune.js';
import { queuesCommand } from './commands/queues.js';
import { rolesCommand } from './commands/roles.js';
import { schedulesCommand } from './commands/schedules.js';
import { serveCommand } from './commands/serve.js';
import { statsCommand } from './commands/stats.js';
import { statusCommand } from './commands/status.js';
import { tasksCommand } from './commands/tasks.js';
import { tenantsCommand } from './commands/tenants.js';
import { tokensCommand } from './commands/tokens.js';
import { upkeepCommand } from './commands/upkeep.js';
import { workerCommand } from './commands/worker.js';
import { urlSource } from './context.js';
import { databaseErrorLine } from './errors.js';

const program = new Command('tusk')
  .description(
    'Tusk: a PostgreSQL job queue. Connects to --database-url, else DATABASE_URL, else an embedded PostgreSQL in ./.tusk/pg.',
  )
  .version(VERSION)
  .option('--database-url <url>', 'PostgreSQL connection string (default: DATABASE_URL, else embedded)')
  .option('--schema <name>', "schema of Tusk's tables (default: TUSK_SCHEMA, else tusk)")
  .configureOutput({
    // commander's own errors (unknown option, missing argument...) in the style of the others
    outputError: (text, write) =>
      write(
        `${text
          .trim()
          .replace(/^error: /, 'tusk: ')
          .replace(/\s*\n\s*/g, ' ')} (see ${helpOf(process.argv.slice(2))})\n`,
      ),
  })
  .exitOverride();

/** The help that applies to these arguments: `tusk enqueue --help`, `tusk schedules set --help`... */
function helpOf(args: string[]): string {
  const words: string[] = [];
  let at: Command = program;
  for (const arg of args) {
    const next = at.commands.find((c) => c.name() === arg || c.aliases().includes(arg));
    if (!next) continue;
    words.push(next.name());
    at = next;
  }
  return ['tusk', ...words, '--help'].join(' ');
}

for (const register of [
  migrateCommand,
  workerCommand,
  drainCommand,
  upkeepCommand,
  enqueueCommand,
  statusCommand,
  tenantsCommand,
  queuesCommand,
  tasksCommand,
  schedulesCommand,
  pruneCommand,
  statsCommand,
  serveCommand,
  tokensCommand,
  rolesCommand,
  demoCommand,
]) {
  register(program);
}

try {
  await program.parseAsync();
} catch (error) {
  process.exitCode = error instanceof CommanderError ? error.exitCode : 1;
  if (error instanceof TuskError) {
    console.error(`tusk: ${error.message}`);
  } else if (!(error instanceof CommanderError)) {
    // a database failure in one line; anything else is a bug, with its stack
    let line: string | null = null;
    try {
      line = databaseErrorLine(error, urlSource(program));
    } catch {
      // a bad URL was refused already
    }
    console.error(line ? `tusk: ${line}` : error);
  }
}
