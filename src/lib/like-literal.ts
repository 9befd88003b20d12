/**
 * Prisma's `startsWith` and `contains` are LIKE patterns on PostgreSQL and it does not escape
 * them: a search for `%` would match everything. This makes `%`, `_` and a backslash match
 * themselves.
 */
export const likeLiteral = (text: string) => text.replace(/[\\%_]/g, (c) => `\\${c}`);
