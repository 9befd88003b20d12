import { operationForbidden } from '../../errors.js';
import type { MarketplaceTransaction } from '../../generated/prisma/client.js';
import { builder } from '../../api/builder.js';
import { closedValues } from '../../api/closed-values.js';
import { paymentProviders } from './payment-providers.js';
import { principalOf } from '../../api/context.js';
import { listType } from '../../api/list.js';
import { mutation, query } from '../../api/operations.js';
import { priceText } from './template.service.js';
import { tag } from './template.graphql.js';

/** What a purchase can be: `pending` until an invoice is confirmed, then `completed`. */
const purchaseStatuses = ['pending', 'completed'] as const;

/** Purchases of templates: buying, the org's purchases and sales, and the publisher confirming an invoice. */
const TransactionRef = builder.objectRef<MarketplaceTransaction>('MarketplaceTransaction').implement({
  description: 'A purchase of a template: the buyer’s, and the publisher’s sale.',
  fields: (t) => ({
    transaction_id: t.exposeID('id'),
    status: t.exposeString('status', {
      description: '`completed`, or `pending` until the publisher confirms payment.',
      ...closedValues(purchaseStatuses),
    }),
    manifest_id: t.exposeString('templateId', { description: 'The template bought.' }),
    template_version: t.exposeInt('templateVersion'),
    content_hash: t.exposeString('contentHash', { description: 'What exactly was bought.' }),
    amount: t.string({ description: 'The price at purchase time, exact.', resolve: (x) => priceText(x.amount) }),
    currency: t.exposeString('currency'),
    payment_method: t.exposeString('paymentMethod', closedValues([...paymentProviders.keys()])),
    agent_id: t.exposeString('agentId', { description: 'The agent id the manifest is registered for.' }),
    registered_manifest_id: t.exposeString('manifestId', {
      nullable: true,
      description: 'The pending manifest in the buyer’s org, once completed.',
    }),
    buyer_org_id: t.exposeString('buyerOrgId'),
    publisher_org_id: t.exposeString('publisherOrgId'),
    purchased_by: t.exposeString('purchasedBy'),
    confirmed_by: t.exposeString('confirmedBy', { nullable: true }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    completed_at: t.expose('completedAt', { type: 'Timestamp', nullable: true }),
  }),
});

const PurchaseRef = builder.objectRef<MarketplaceTransaction>('MarketplacePurchase').implement({
  fields: (t) => ({
    transaction_id: t.exposeID('id'),
    status: t.exposeString('status', closedValues(purchaseStatuses)),
    manifest: t.prismaField({
      type: 'Manifest',
      nullable: true,
      description: 'The pending manifest registered in the buyer’s org (the register response); null while pending.',
      resolve: (query, txn, _, ctx) =>
        txn.manifestId ? ctx.services.manifests.get(txn.buyerOrgId, txn.manifestId, query) : null,
    }),
  }),
});

const TransactionList = listType('MarketplaceTransactionList', TransactionRef);
const trade = { own: 'marketplace:trade' as const };

const marketplacePurchaseMutation = mutation('marketplace_purchase', {
  field: (t) =>
    t.field({
      type: PurchaseRef,
      description:
        'Buys a published template at the server’s price. `free` (price 0) completes at once; `invoice` is pending until the ' +
        'publisher’s admin confirms payment. A completed purchase registers a pending manifest in the caller’s org. With an ' +
        '`Idempotency-Key` header, a retried purchase answers the first transaction; the key sent with a different ' +
        'manifest_id, payment_method or agent_id is 422 IDEMPOTENCY_KEY_REUSED, and while the first request still runs 409 ' +
        'CONFLICT. A purchase that failed leaves the key unused.',
      args: {
        manifest_id: t.arg.id({ required: true, description: 'The template.' }),
        payment_method: t.arg.string({
          required: true,
          description: '`free` or `invoice`.',
          ...closedValues([...paymentProviders.keys()]),
        }),
        agent_id: t.arg.string({ description: 'Default: a slug of the template name.' }),
      },
      authScopes: trade,
      resolve: (_, args, ctx) => {
        const principal = principalOf(ctx);
        if (principal.type !== 'user') throw operationForbidden();
        const key = ctx.request.headers.get('idempotency-key');
        return ctx.services.purchases.purchase(principal, { ...args, manifest_id: String(args.manifest_id) }, key);
      },
    }),
  rest: {
    // The template named in the body may not exist (404) or not be published (409).
    extraErrors: ['404', '409'],
    errorNotes: {
      '409': 'CONFLICT also while a purchase with the same Idempotency-Key is still running',
      '422':
        'IDEMPOTENCY_KEY_REUSED: the Idempotency-Key was used for a purchase with another manifest_id, payment_method or agent_id (its transaction is not returned)',
    },
    method: 'POST',
    path: '/marketplace/purchase',
    mount: 'root',
    status: 201,
    tag,
    summary: 'Purchase a template (`Idempotency-Key` header honoured)',
    auth: ['bearer'],
  },
});

const marketplaceTransactionsQuery = query('marketplace_transactions', {
  field: (t) =>
    t.field({
      type: TransactionList,
      description: 'The organization’s purchases and sales, newest first.',
      args: { limit: t.arg.int({ description: 'Default 50, at most 200.' }), offset: t.arg.int() },
      authScopes: trade,
      resolve: (_, args, ctx) => ctx.services.purchases.list(principalOf(ctx).orgId, args),
    }),
  rest: {
    method: 'GET',
    path: '/marketplace/transactions',
    mount: 'root',
    tag,
    summary: 'List purchases and sales',
    auth: ['bearer'],
  },
});

const confirmMarketplaceTransactionMutation = mutation('confirm_marketplace_transaction', {
  field: (t) =>
    t.field({
      type: TransactionRef,
      description:
        'The publisher’s admin confirms an invoice was paid: the purchase completes and the buyer gets its pending manifest.',
      args: { transaction_id: t.arg.id({ required: true }) },
      authScopes: trade,
      resolve: (_, args, ctx) => {
        const principal = principalOf(ctx);
        if (principal.type !== 'user') throw operationForbidden();
        return ctx.services.purchases.confirm(principal, String(args.transaction_id));
      },
    }),
  rest: {
    extraErrors: ['409'],
    method: 'POST',
    path: '/marketplace/transactions/:transaction_id/confirm',
    mount: 'root',
    tag,
    summary: 'Confirm payment of an invoice (the publisher’s admin)',
    auth: ['bearer'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const purchaseOperations = [
  marketplacePurchaseMutation,
  marketplaceTransactionsQuery,
  confirmMarketplaceTransactionMutation,
];
