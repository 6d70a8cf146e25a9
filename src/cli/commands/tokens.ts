import type { Command } from 'commander';
import { formatScopes, parseScopes, SCOPES } from '../../http/scopes.js';
import { ApiTokens } from '../../http/tokens.js';
import { intOption, tuskFor } from '../context.js';
import { renderTable } from '../table.js';

const day = (d: Date | null) => (d ? d.toISOString().slice(0, 16).replace('T', ' ') : null);

async function withTokens(command: Command, run: (tokens: ApiTokens) => Promise<void>): Promise<void> {
  const tusk = tuskFor(command);
  try {
    await run(new ApiTokens(() => tusk.pool(), tusk.schema));
  } finally {
    await tusk.close();
  }
}

export function tokensCommand(program: Command): void {
  const tokens = program
    .command('tokens')
    .description(
      'API tokens of tusk serve: whose jobs a token sees (one tenant, or every one) and what it may do (its scopes)',
    );
  tokens
    .command('create')
    .description('create a token and print it: it is shown this once (only its hash is kept)')
    .option('--tenant <tenant>', 'a tenant token: sees and acts on this tenant’s jobs only (default: every tenant’s)')
    .option(
      '--scope <scopes>',
      `what it may do, joined by + or commas: ${SCOPES.join(', ')} (default: enqueue+read+manage+lease with --tenant, else admin)`,
    )
    .option('--name <name>', 'a note: who or what uses it')
    .action((options: { tenant?: string; name?: string; scope?: string }, command: Command) =>
      withTokens(command, async (t) => {
        const { scope, ...rest } = options;
        const scopes = scope === undefined ? {} : { scopes: parseScopes(scope, options.tenant ?? null, '--scope') };
        const { token, info } = await t.create({ ...rest, ...scopes });
        console.error(
          `token ${info.id}${info.tenant === null ? '' : ` for tenant ${info.tenant}`} (${formatScopes(info.scopes)}): shown once, store it now`,
        );
        console.log(token);
      }),
    );
  tokens
    .command('list')
    .description('every token (never the token itself)')
    .action((_o, command: Command) =>
      withTokens(command, async (t) => {
        const list = await t.list();
        console.log(
          renderTable(
            ['id', 'name', 'tenant', 'scopes', 'starts with', 'created', 'last used', 'revoked'],
            list.map((i) => [
              i.id,
              i.name || null,
              i.tenant ?? 'every',
              formatScopes(i.scopes),
              `${i.prefix}…`,
              day(i.createdAt),
              day(i.lastUsedAt),
              day(i.revokedAt),
            ]),
          ),
        );
      }),
    );
  tokens
    .command('revoke')
    .argument('<id>', 'token id (see tokens list)', intOption('id', 1))
    .description('revoke a token: refused from the next request on')
    .action((id: number, _o, command: Command) =>
      withTokens(command, async (t) => {
        if (await t.revoke(id)) console.log(`token ${id} revoked`);
        else {
          console.error(`tusk: no live token with id ${id}`);
          process.exitCode = 1;
        }
      }),
    );
}
