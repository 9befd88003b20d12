import type { Deps } from '../../deps.js';
import { limitOffset } from '../../lib/list-page.js';
import { AppError, FieldErrors, conflict, notFound } from '../../errors.js';
import { canonicalHash } from '../../lib/canonical-json.js';
import type { ManifestTemplate, MarketplaceTransaction, Prisma } from '../../generated/prisma/client.js';
import { randomId } from '../../lib/ids.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import type { UserPrincipal } from '../../authz/authz.js';
import { agentIdPattern } from '../manifest/manifest-document.js';
import { pendingConflict, type ManifestService } from '../manifest/manifest.service.js';
import { bindKey, claimKey, keyState, releaseKey, type KeyState, type KeyedRequest } from './idempotency.store.js';
import { paymentProviders, type PaymentProvider } from './payment-providers.js';
import {
  completeTransaction,
  confirmPendingTransaction,
  countCompletedPurchases,
  findSale,
  findTransaction,
  findTransactionOrThrow,
  insertTransaction,
  listTransactions,
  templateIdOfAgent,
} from './purchase.store.js';
import { operationsOf, priceText, type TemplateService } from './template.service.js';
import { findTemplate, findTemplateOrThrow } from './template.store.js';

/**
 * Buying a template (docs/decisions/0021-templates-and-marketplace.md). The price is the server's at purchase
 * time; the payment provider says whether the purchase completes now or waits for the publisher
 * to confirm payment. A completed purchase registers the template as a *pending* manifest in the
 * buyer's org, through the manifest module in the purchase's own transaction: the same validation,
 * agent creation, history, audit and one-pending-per-agent rule as any registration, and buying
 * never activates anything. An Idempotency-Key makes a retried purchase answer the first one.
 */

export interface PurchaseInput {
  manifest_id?: string | null;
  payment_method?: string | null;
  agent_id?: string | null;
}

const MAX_IDEMPOTENCY_KEY = 255;
const idempotencyKeyPattern = /^[\x21-\x7e]+$/;
const methods = () => [...paymentProviders.values()].map((p) => `${p.method} (${p.description})`).join(', ');

/** An agent id from a template's name: "Refund Assistant 2" → "refund-assistant-2". */
export const agentIdFromName = (name: string) =>
  name
    .toLowerCase()
    .normalize('NFKD')
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 64)
    .replace(/-+$/, '');

/** The manifest a template becomes in the buyer's org. */
function manifestPayload(template: ManifestTemplate, agentId: string) {
  return {
    version: '1.0',
    agent: {
      id: agentId,
      name: template.name,
      version: `${template.version}.0.0`,
      ...(template.description ? { description: template.description } : {}),
    },
    capabilities: { requested: operationsOf(template).map((o) => o.capability) },
    ...(template.constraints ? { constraints: template.constraints } : {}),
  };
}

/**
 * What an Idempotency-Key is bound to: the request's meaningful fields as sent (an omitted agent_id
 * is not the same request as the default agent id spelled out).
 */
export const purchaseRequestHash = (input: PurchaseInput): string =>
  canonicalHash({
    manifest_id: input.manifest_id ?? null,
    payment_method: input.payment_method ?? null,
    agent_id: input.agent_id ?? null,
  });

const keyReused = () =>
  new AppError(
    'IDEMPOTENCY_KEY_REUSED',
    'This Idempotency-Key belongs to a different purchase (its manifest_id, payment_method or agent_id differ); use a new key for a new purchase',
  );
const stillRunning = () =>
  conflict('A purchase with this Idempotency-Key is still running; retry once it has completed');

export function createPurchaseService(
  { db }: Deps,
  modules: { manifests: Pick<ManifestService, 'registerIn'>; templates: Pick<TemplateService, 'get'> },
) {
  /**
   * A purchase, at most once per Idempotency-Key. The key is claimed before the purchase runs
   * (idempotency.store.ts); a request that finds it claimed answers from the key's state: another
   * request's fields, 422 IDEMPOTENCY_KEY_REUSED; the first request still running, 409 CONFLICT;
   * completed, its transaction. A purchase that fails made nothing (one database transaction), so
   * it releases its claim and the key can be used again, with the same request or a corrected one.
   */
  async function purchase(
    principal: UserPrincipal,
    input: PurchaseInput,
    idempotencyKey: string | null,
  ): Promise<MarketplaceTransaction> {
    const errors = new FieldErrors();
    if (
      idempotencyKey !== null &&
      (idempotencyKey.length > MAX_IDEMPOTENCY_KEY || !idempotencyKeyPattern.test(idempotencyKey))
    ) {
      errors.add('Idempotency-Key', `must be 1 to ${MAX_IDEMPOTENCY_KEY} visible ASCII characters`);
    }
    const provider = paymentProviders.get(input.payment_method ?? '');
    if (!provider) errors.add('payment_method', `must be one of: ${methods()}`);
    errors.throwIfAny();
    if (idempotencyKey === null) return buy(principal, input, provider!, null);
    const request: KeyedRequest = { key: idempotencyKey, requestHash: purchaseRequestHash(input) };
    // The holder can release the key between our claim and our read: then it is free to claim again.
    for (let attempt = 0; attempt < 3; attempt++) {
      if (await claimKey(db.sql, principal.orgId, request)) return buyClaimed(principal, input, provider!, request);
      const state = await keyState(db.sql, principal.orgId, request.key);
      if (state) return answerFrom(state, request);
    }
    throw stillRunning();
  }

  /** What a request answers when its key is held by another request. */
  async function answerFrom(state: KeyState, request: KeyedRequest): Promise<MarketplaceTransaction> {
    if (state.requestHash !== null && state.requestHash !== request.requestHash) throw keyReused();
    if (state.transactionId === null) throw stillRunning();
    return findTransactionOrThrow(db.prisma, state.transactionId);
  }

  async function buyClaimed(
    principal: UserPrincipal,
    input: PurchaseInput,
    provider: PaymentProvider,
    request: KeyedRequest,
  ) {
    try {
      return await buy(principal, input, provider, request);
    } catch (error) {
      // Should the release fail too, the claim lapses after a minute (idempotency.store.ts); the
      // purchase's own error is the one to answer.
      await releaseKey(db.sql, principal.orgId, request).catch(() => undefined);
      // A purchase that outlived its claim met the one that took the key over and completed first
      // (the transactions' unique key): answer as any later request with the key would.
      const state =
        error instanceof AppError && error.code === 'CONFLICT'
          ? await keyState(db.sql, principal.orgId, request.key)
          : undefined;
      if (state?.transactionId) return answerFrom(state, request);
      throw error;
    }
  }

  async function buy(
    principal: UserPrincipal,
    input: PurchaseInput,
    provider: PaymentProvider,
    request: KeyedRequest | null,
  ): Promise<MarketplaceTransaction> {
    const orgId = principal.orgId;
    const errors = new FieldErrors();
    const template = await modules.templates.get(orgId, input.manifest_id ?? '');
    if (template.status !== 'published')
      throw conflict(`The template is ${template.status}; only published templates can be purchased`, {
        status: template.status,
      });
    const charge = provider.charge({ amount: template.price, currency: template.currency });
    const agentId = input.agent_id ?? agentIdFromName(template.name);
    if ('refused' in charge)
      errors.add(
        'payment_method',
        `"${provider.method}" ${charge.refused} (the price is ${priceText(template.price)} ${template.currency})`,
      );
    if (!agentIdPattern.test(agentId))
      errors.add('agent_id', `must be lowercase letters, digits and hyphens (${agentIdPattern.source})`);
    errors.throwIfAny();
    const status = (charge as { status: 'completed' | 'pending' }).status;
    try {
      return await db.prisma.$transaction(async (tx) => {
        const created = await insertTransaction(tx, {
          id: randomId('txn'),
          buyerOrgId: orgId,
          publisherOrgId: template.orgId,
          templateId: template.id,
          templateVersion: template.version,
          contentHash: template.contentHash,
          amount: template.price,
          currency: template.currency,
          paymentMethod: provider.method,
          status,
          agentId,
          idempotencyKey: request?.key ?? null,
          purchasedBy: principal.email,
          purchasedByUserId: principal.userId,
        });
        const done = status === 'completed' ? await deliver(tx, created, template, principal) : created;
        await recordAudit(tx, orgId, actorOf(principal), {
          action: 'marketplace.purchased',
          targetType: 'marketplace_transaction',
          targetId: created.id,
          after: transactionSnapshot(done),
        });
        // Last: writing the key locks its row until the commit, and until then another request
        // with the key should find it running (409) rather than wait for the whole purchase.
        if (request) await bindKey(tx, orgId, request, created.id);
        return done;
      });
    } catch (error) {
      throw pendingConflict(error, agentId);
    }
  }

  /** Registers the purchased template as a pending manifest of the buyer, in the caller's transaction. */
  async function deliver(
    tx: Prisma.TransactionClient,
    txn: MarketplaceTransaction,
    template: ManifestTemplate,
    buyer: UserPrincipal,
  ) {
    const manifestId = await modules.manifests.registerIn(
      tx,
      txn.buyerOrgId,
      manifestPayload(template, txn.agentId),
      buyer,
    );
    return completeTransaction(tx, txn.id, manifestId);
  }

  /**
   * The publisher's admin confirms an invoice was paid: the purchase completes and the manifest is
   * registered in the buyer's org, on behalf of the buyer who purchased (its history and audit name
   * them). Another org's transaction is 404, whoever bought it.
   */
  async function confirm(principal: UserPrincipal, transactionId: string): Promise<MarketplaceTransaction> {
    try {
      return await db.prisma.$transaction(async (tx) => {
        const txn = await findSale(tx, principal.orgId, transactionId);
        if (!txn) throw notFound('Transaction');
        if (!(await confirmPendingTransaction(tx, txn.id, principal.email))) {
          throw new AppError('INVALID_STATE_TRANSITION', `The transaction is ${txn.status}`, {
            details: { from: txn.status, to: 'completed' },
          });
        }
        const template = await findTemplateOrThrow(tx, txn.templateId);
        const buyer: UserPrincipal = {
          type: 'user',
          userId: txn.purchasedByUserId,
          orgId: txn.buyerOrgId,
          email: txn.purchasedBy,
          role: 'admin',
          // Not a session: the buyer acts through this confirmation alone.
          tokenId: `marketplace:${txn.id}`,
          tokenExpiresAt: new Date(),
          sessionFamilyId: `marketplace:${txn.id}`,
        };
        const done = await deliver(tx, txn, template, buyer);
        await recordAudit(tx, principal.orgId, actorOf(principal), {
          action: 'marketplace.payment_confirmed',
          targetType: 'marketplace_transaction',
          targetId: txn.id,
          before: transactionSnapshot(txn),
          after: transactionSnapshot(done),
        });
        return done;
      });
    } catch (error) {
      const txn = await findTransaction(db.prisma, transactionId);
      throw txn ? pendingConflict(error, txn.agentId) : error;
    }
  }

  /** The org's purchases and sales, newest first. */
  async function list(orgId: string, page: { limit?: number | null; offset?: number | null }) {
    const errors = new FieldErrors();
    const { limit, offset } = limitOffset(page, { limit: 50, max: 200 }, errors);
    errors.throwIfAny();
    return listTransactions(db.prisma, orgId, { take: limit, skip: offset });
  }

  /** Completed purchases of each of these templates (the publisher's metadata). */
  async function purchasesOf(templateId: string): Promise<number> {
    return countCompletedPurchases(db.prisma, templateId);
  }

  /**
   * What the marketplace says each capability of an agent does: the operations of the template
   * the agent's newest completed purchase acquired (an MCP tool's description); empty when the
   * agent was not acquired there.
   */
  async function operationDescriptions(orgId: string, agentId: string): Promise<Map<string, string>> {
    const templateId = await templateIdOfAgent(db.prisma, orgId, agentId);
    const template = templateId && (await findTemplate(db.prisma, templateId));
    return new Map(template ? operationsOf(template).map((o) => [o.capability, o.description]) : []);
  }

  return { purchase, confirm, list, purchasesOf, operationDescriptions };
}

const transactionSnapshot = (t: MarketplaceTransaction) => ({
  status: t.status,
  template_id: t.templateId,
  content_hash: t.contentHash,
  amount: priceText(t.amount),
  currency: t.currency,
  payment_method: t.paymentMethod,
  agent_id: t.agentId,
  manifest_id: t.manifestId,
});

export type PurchaseService = ReturnType<typeof createPurchaseService>;
