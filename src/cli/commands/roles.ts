import type { Command } from 'commander';
import { validateSchemaName } from '../../db/schema.js';
import { checkSchema } from '../../migrate/migrate.js';
import { createRoles, roleNames } from '../../queries/roles.js';
import { optionError, tuskFor } from '../context.js';

/** `tusk roles create`: the least-privilege database roles of the schema. */
export function rolesCommand(program: Command): void {
  const roles = program.command('roles').description('least-privilege database roles for producers, workers, the API');
  roles
    .command('create')
    .description(
      'create (or update) the NOLOGIN roles <prefix>_producer, <prefix>_worker and <prefix>_api with what each ' +
        'needs on the schema (what later migrations create as the schema owner goes to the API role too; run it ' +
        'again after a `tusk migrate` run by another role, or for the producer and worker roles after an ' +
        'upgrade). Needs CREATEROLE and the schema owner',
    )
    .option('--prefix <name>', 'the roles’ prefix (default: the schema name)')
    .action(async (options: { prefix?: string }, command: Command) => {
      const tusk = tuskFor(command);
      try {
        const prefix = options.prefix ?? tusk.schema;
        validateSchemaName(prefix, '--prefix');
        if (prefix.length > 54) throw optionError('--prefix', `must be at most 54 characters (got ${prefix.length})`);
        const pool = await tusk.pool();
        await checkSchema(pool, tusk.schema);
        await createRoles(pool, tusk.schema, prefix);
        const r = roleNames(prefix);
        console.log(
          `roles ${r.producer}, ${r.worker} and ${r.api} are set up on schema "${tusk.schema}"; ` +
            `give one to a login role: GRANT ${r.worker} TO my_worker_login;`,
        );
      } finally {
        await tusk.close();
      }
    });
}
