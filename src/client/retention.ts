import { z } from 'zod';
import { describe } from '../validation/validate.js';

const UNITS = ['hour', 'day', 'week', 'month', 'year'] as const;
const RETENTION = /^\s*(\d{1,6})\s*(hour|day|week|month|year)s?\s*$/i;

/**
 * A retention period: `'30 days'`, `'12 hours'`, `'2 weeks'`, `'6 months'`, `'1 year'`;
 * normalized to PostgreSQL interval text ('30 days'). Null resets.
 */
export const retentionSchema = z
  .string({ error: (issue) => `must be a period like '30 days' (got ${describe(issue.input)})` })
  .transform((text, ctx) => {
    const match = RETENTION.exec(text);
    const n = Number(match?.[1]);
    if (!match || n < 1) {
      ctx.addIssue({
        code: 'custom',
        message: `must be a period like '30 days': a positive number of ${UNITS.join('s, ')}s (got ${describe(text)})`,
      });
      return z.NEVER;
    }
    return `${n} ${match[2]?.toLowerCase()}${n === 1 ? '' : 's'}`;
  })
  .nullable();
