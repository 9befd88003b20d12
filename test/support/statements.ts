import type { TypedDocumentNode } from '@graphql-typed-document-node/core';
import { print } from 'graphql';
import type { TestApp } from './app.js';
import type { Statement } from './plans.js';

/**
 * Counts the SQL statements Prisma sends while a piece of work runs (the N+1 bounds of the
 * dashboard queries). Pass `observe` as startTestApp's `onQuery`.
 */
export class StatementCounter {
  private readonly seen: Statement[] = [];
  private counting = false;
  readonly observe = (text: string, values: readonly unknown[]) => {
    if (this.counting) this.seen.push({ text, values: [...values] });
  };

  async count<T>(
    work: () => Promise<T>,
  ): Promise<{ result: T; count: number; statements: string[]; sent: Statement[] }> {
    this.seen.length = 0;
    this.counting = true;
    try {
      const result = await work();
      return { result, count: this.seen.length, statements: this.seen.map((s) => s.text), sent: [...this.seen] };
    } finally {
      this.counting = false;
    }
  }
}

/** A typed GraphQL operation through the app; fails the test on any GraphQL error. */
export async function runOperation<Result, Variables extends Record<string, unknown>>(
  t: TestApp,
  document: TypedDocumentNode<Result, Variables>,
  variables: Variables,
  token: string,
): Promise<Result> {
  const response = await t.graphql<{ data: Result; errors?: unknown[] }>(print(document), variables, { token });
  expect(response.body.errors).toBeUndefined();
  return response.body.data;
}
