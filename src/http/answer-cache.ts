import type { UserPrincipal } from '../authz/authz.js';
import type { PlainAnswer } from './envelope.js';

/**
 * Operators' read answers kept with the org data version they were made at
 * (docs/decisions/0084-answer-cache-by-data-version.md). The bearer check reads that version with
 * the caller's role in the statement it runs anyway; triggers bump it in the transaction of every
 * write to the tables a cached route reads (its `answerCache.tables`). An answer whose version is
 * the one the caller's check just read is the answer a read done then would give, on any process
 * of the deployment. Credentials, revocation and the operator rate limit are checked before, on
 * every request, as for any read.
 *
 * A kept answer is the caller's own: the key is the user, their role and the URL, and only 200
 * answers about the caller's own org (the version covers that org alone) are kept.
 */
export class AnswerCache {
  private readonly entries = new Map<string, { version: string; answer: PlainAnswer }>();

  constructor(
    /** Answers kept at most; the oldest kept goes first. */
    private readonly maxEntries = 5_000,
    /** A longer body (characters) is not kept: the bound on memory is entries × this. */
    private readonly maxBodyLength = 32 * 1024,
  ) {}

  /** Where the caller's answer to this URL is kept. */
  static keyOf(principal: UserPrincipal, routeLabel: string, url: URL): string {
    return `${principal.userId} ${principal.role} ${routeLabel} ${url.pathname}${url.search}`;
  }

  /** The answer kept under `key` for exactly this version; a copy, the caller's to change. */
  get(key: string, version: string): PlainAnswer | undefined {
    const kept = this.entries.get(key);
    if (!kept) return undefined;
    if (kept.version !== version) {
      this.entries.delete(key);
      return undefined;
    }
    const { status, headers, body } = kept.answer;
    return { status, headers: { ...headers }, body };
  }

  /** Keeps a 200 answer made at `version` (read before the answer was made, so never newer than it). */
  set(key: string, version: string, answer: PlainAnswer): void {
    if (answer.status !== 200 || answer.body.length > this.maxBodyLength) return;
    this.entries.delete(key);
    if (this.entries.size >= this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, {
      version,
      answer: { status: answer.status, headers: { ...answer.headers }, body: answer.body },
    });
  }

  get size(): number {
    return this.entries.size;
  }
}
