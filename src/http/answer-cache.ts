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
 * A kept answer is the caller's own: the key is the user, their role, the route and its arguments,
 * and only 200 answers about the caller's own org (the version covers that org alone) are kept.
 */
export class AnswerCache {
  private readonly entries = new Map<string, { version: string; answer: PlainAnswer; length: number }>();
  /** The characters of the kept keys and bodies. */
  private kept = 0;

  constructor(
    /** The characters of keys and bodies kept at most (≈ bytes; twice that for non-Latin text): the oldest kept goes first. */
    private readonly maxTotalLength = 4 * 1024 * 1024,
    /** A longer body is not kept: one large list does not push out many small answers. */
    private readonly maxBodyLength = 32 * 1024,
  ) {}

  /**
   * Where the caller's answer to the route with these arguments is kept: the field's arguments as
   * the read coerced them, not the URL's text, so that query parameters the route ignores, or the
   * order they come in, do not keep the same answer many times over.
   */
  static keyOf(principal: UserPrincipal, routeLabel: string, args: Record<string, unknown>): string {
    return `${principal.userId} ${principal.role} ${routeLabel} ${JSON.stringify(args)}`;
  }

  /** The answer kept under `key` for exactly this version; a copy, the caller's to change. */
  get(key: string, version: string): PlainAnswer | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (entry.version !== version) {
      this.drop(key);
      return undefined;
    }
    const { status, headers, body } = entry.answer;
    return { status, headers: { ...headers }, body };
  }

  /** Keeps a 200 answer made at `version` (read before the answer was made, so never newer than it). */
  set(key: string, version: string, answer: PlainAnswer): void {
    if (answer.status !== 200 || answer.body.length > this.maxBodyLength) return;
    this.drop(key);
    const length = key.length + answer.body.length;
    for (const oldest of this.entries.keys()) {
      if (this.kept + length <= this.maxTotalLength) break;
      this.drop(oldest);
    }
    this.entries.set(key, {
      version,
      answer: { status: answer.status, headers: { ...answer.headers }, body: answer.body },
      length,
    });
    this.kept += length;
  }

  private drop(key: string): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    this.kept -= entry.length;
  }

  /** Answers kept, and their keys' and bodies' characters. */
  get size(): { answers: number; length: number } {
    return { answers: this.entries.size, length: this.kept };
  }
}
