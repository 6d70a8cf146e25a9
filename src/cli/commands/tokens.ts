import type { Command } from 'commander';
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
    .description('API tokens of tusk serve: admin tokens, and tenant tokens that see their tenant only');
  tokens
    .command('create')
    .description('create a token and print it: it is shown this once (only its hash is kept)')
    .option('--tenant <tenant>', 'a tenant token: sees and acts on this tenant’s jobs only (default: admin)')
    .option('--name <name>', 'a note: who or what uses it')
    .action((options: { tenant?: string; name?: string }, command: Command) =>
      withTokens(command, async (t) => {
        const { token, info } = await t.create(options);
        console.error(
          `token ${info.id}${info.tenant === null ? ' (admin)' : ` for tenant ${info.tenant}`}: shown once, store it now`,
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
            ['id', 'name', 'scope', 'starts with', 'created', 'last used', 'revoked'],
            list.map((i) => [
              i.id,
              i.name || null,
              i.tenant === null ? 'admin' : `tenant ${i.tenant}`,
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
