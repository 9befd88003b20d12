import type { ManifestTemplate } from '../../generated/prisma/client.js';
import { builder } from '../../api/builder.js';
import { principalOf } from '../../api/context.js';
import { mutation, query } from '../../api/operations.js';
import { operationsOf, priceText, templateStatuses, type Operation } from './template.service.js';

/**
 * The marketplace's templates over GraphQL and, mounted at the root
 * (docs/decisions/0021-templates-and-marketplace.md), over REST: `/manifests…` and
 * `/marketplace/manifests`.
 */

type WithPublisher = ManifestTemplate & { org: { name: string } };

const TemplateStatusEnum = builder.enumType('ManifestTemplateStatus', { values: templateStatuses });
export const tag = 'Marketplace';
const read = { own: 'template:read' as const };
const write = { own: 'template:write' as const };

const OperationRef = builder.objectRef<Operation>('TemplateOperation').implement({
  fields: (t) => ({ capability: t.exposeString('capability'), description: t.exposeString('description') }),
});

const PublisherRef = builder.objectRef<{ org_id: string; name: string }>('TemplatePublisher').implement({
  fields: (t) => ({ org_id: t.exposeID('org_id'), name: t.exposeString('name') }),
});

const publisherOf = (t: WithPublisher) => ({ org_id: t.orgId, name: t.org.name });

/** A template without its operations (they stand beside it in the detail answer). */
const TemplateRef = builder.objectRef<WithPublisher>('ManifestTemplate').implement({});
/** A whole template, operations included (publish and archive answer it). */
const FullTemplateRef = builder.objectRef<WithPublisher>('ManifestTemplateWithOperations').implement({});

for (const ref of [TemplateRef, FullTemplateRef]) {
  builder.objectFields(ref, (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name'),
    description: t.exposeString('description'),
    category: t.exposeString('category'),
    constraints: t.field({ type: 'JSON', nullable: true, resolve: (m) => m.constraints }),
    price: t.string({
      description: 'Exact decimal with two places, e.g. "12.50".',
      resolve: (m) => priceText(m.price),
    }),
    currency: t.exposeString('currency', { description: 'ISO 4217.' }),
    status: t.field({ type: TemplateStatusEnum, resolve: (m) => m.status as (typeof templateStatuses)[number] }),
    version: t.exposeInt('version'),
    publisher: t.field({ type: PublisherRef, resolve: publisherOf }),
    content_hash: t.exposeString('contentHash', {
      description: '"sha256:" of the canonical JSON of name, description, category, operations and constraints.',
    }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
    updated_at: t.expose('updatedAt', { type: 'Timestamp' }),
    published_at: t.expose('publishedAt', { type: 'Timestamp', nullable: true }),
  }));
}
builder.objectField(FullTemplateRef, 'operations', (t) => t.field({ type: [OperationRef], resolve: operationsOf }));

const TemplateSummaryRef = builder.objectRef<ManifestTemplate>('ManifestTemplateSummary').implement({
  fields: (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name'),
    description: t.exposeString('description'),
    category: t.exposeString('category'),
    status: t.field({ type: TemplateStatusEnum, resolve: (m) => m.status as (typeof templateStatuses)[number] }),
    price: t.string({ resolve: (m) => priceText(m.price) }),
    currency: t.exposeString('currency'),
    operations_count: t.int({ resolve: (m) => operationsOf(m).length }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
  }),
});

const PaginationRef = builder
  .objectRef<{ page: number; limit: number; total: number; pages: number }>('Pagination')
  .implement({
    fields: (t) => ({
      page: t.exposeInt('page'),
      limit: t.exposeInt('limit'),
      total: t.exposeInt('total'),
      pages: t.exposeInt('pages'),
    }),
  });

const TemplateListRef = builder
  .objectRef<{
    manifests: ManifestTemplate[];
    pagination: { page: number; limit: number; total: number; pages: number };
  }>('ManifestTemplateList')
  .implement({
    fields: (t) => ({
      manifests: t.field({ type: [TemplateSummaryRef], resolve: (l) => l.manifests }),
      pagination: t.field({ type: PaginationRef, resolve: (l) => l.pagination }),
    }),
  });

const TemplateMetadataRef = builder.objectRef<WithPublisher>('ManifestTemplateMetadata').implement({
  fields: (t) => ({
    version: t.exposeInt('version'),
    constraints: t.field({ type: 'JSON', nullable: true, resolve: (m) => m.constraints }),
    content_hash: t.exposeString('contentHash'),
    purchases: t.int({
      nullable: true,
      description: "Completed purchases; for the publisher's own templates only (null for others').",
      resolve: (m, _, ctx) => (m.orgId === principalOf(ctx).orgId ? ctx.services.purchases.purchasesOf(m.id) : null),
    }),
  }),
});

const TemplateDetailRef = builder.objectRef<WithPublisher>('ManifestTemplateDetail').implement({
  fields: (t) => ({
    manifest: t.field({ type: TemplateRef, resolve: (m) => m }),
    operations: t.field({ type: [OperationRef], resolve: operationsOf }),
    metadata: t.field({ type: TemplateMetadataRef, resolve: (m) => m }),
  }),
});

const CreatedTemplateRef = builder.objectRef<ManifestTemplate>('CreatedManifestTemplate').implement({
  fields: (t) => ({
    id: t.exposeID('id'),
    status: t.field({ type: TemplateStatusEnum, resolve: (m) => m.status as (typeof templateStatuses)[number] }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
  }),
});

const CategoryCountRef = builder.objectRef<{ category: string; count: number }>('MarketplaceCategory').implement({
  fields: (t) => ({ category: t.exposeString('category'), count: t.exposeInt('count') }),
});

const MarketplaceFiltersRef = builder
  .objectRef<{
    category: string | null;
    min_price: string | null;
    max_price: string | null;
    categories: { category: string; count: number }[];
  }>('MarketplaceFilters')
  .implement({
    fields: (t) => ({
      category: t.exposeString('category', { nullable: true }),
      min_price: t.exposeString('min_price', { nullable: true }),
      max_price: t.exposeString('max_price', { nullable: true }),
      categories: t.field({
        type: [CategoryCountRef],
        description: 'Categories of the published templates the other filters leave, with counts.',
        resolve: (f) => f.categories,
      }),
    }),
  });

type Browse = Awaited<ReturnType<import('./template.service.js').TemplateService['browse']>>;
const MarketplaceListRef = builder.objectRef<Browse>('MarketplaceList').implement({
  fields: (t) => ({
    manifests: t.field({ type: [TemplateRef], resolve: (l) => l.manifests }),
    filters: t.field({ type: MarketplaceFiltersRef, resolve: (l) => l.filters }),
    pagination: t.field({ type: PaginationRef, resolve: (l) => l.pagination }),
  }),
});

const pageArgs = builder.args((t) => ({
  page: t.int({ description: 'From 1 (default 1).' }),
  limit: t.int({ description: 'Default 20, at most 100.' }),
}));

const createManifestTemplateMutation = mutation('create_manifest_template', {
  field: (t) =>
    t.field({
      type: CreatedTemplateRef,
      description: 'A draft template of the caller’s organization.',
      args: {
        name: t.arg.string({ required: true }),
        description: t.arg.string(),
        category: t.arg.string({ required: true, description: 'A lowercase slug.' }),
        operations: t.arg({
          type: 'JSON',
          required: true,
          description: 'Capability strings or {capability, description}; 1 to 100, unique.',
        }),
        price: t.arg({
          type: 'JSON',
          description: 'A decimal string ("12.50") or a number, ≥ 0, at most two places; default "0.00".',
        }),
        currency: t.arg.string({ description: 'ISO 4217, default "USD".' }),
        constraints: t.arg({ type: 'JSON', description: "As a manifest's constraints." }),
      },
      authScopes: write,
      resolve: (_, args, ctx) => ctx.services.templates.create(principalOf(ctx).orgId, args, principalOf(ctx)),
    }),
  rest: {
    method: 'POST',
    path: '/manifests',
    mount: 'root',
    status: 201,
    tag,
    summary: 'Create a manifest template (draft)',
    auth: ['bearer'],
  },
});

const manifestTemplatesQuery = query('manifest_templates', {
  field: (t) =>
    t.field({
      type: TemplateListRef,
      description: 'The caller’s organization’s templates, newest first.',
      args: { ...pageArgs, status: t.arg({ type: TemplateStatusEnum }) },
      authScopes: read,
      resolve: (_, args, ctx) => ctx.services.templates.list(principalOf(ctx).orgId, args),
    }),
  rest: {
    method: 'GET',
    path: '/manifests',
    mount: 'root',
    tag,
    summary: 'List the organization’s templates',
    auth: ['bearer'],
  },
});

const manifestTemplateQuery = query('manifest_template', {
  field: (t) =>
    t.field({
      type: TemplateDetailRef,
      description: 'One of the caller’s templates, or any published one.',
      args: { id: t.arg.id({ required: true }) },
      authScopes: read,
      resolve: (_, args, ctx) => ctx.services.templates.get(principalOf(ctx).orgId, String(args.id)),
    }),
  rest: {
    method: 'GET',
    path: '/manifests/:id',
    mount: 'root',
    tag,
    summary: 'Read a template with its operations',
    auth: ['bearer'],
  },
});

/** Publishing and archiving: the same call, to another state. */
const templateTransitions = (
  [
    ['publish_manifest_template', 'published', 'publish', 'Publish a template to the marketplace'],
    ['archive_manifest_template', 'archived', 'archive', 'Archive a template (it leaves the marketplace)'],
  ] as const
).map(([name, to, path, summary]) =>
  mutation(name, {
    field: (t) =>
      t.field({
        type: FullTemplateRef,
        args: { id: t.arg.id({ required: true }) },
        authScopes: write,
        resolve: (_, args, ctx) =>
          ctx.services.templates.transition(principalOf(ctx).orgId, String(args.id), to, principalOf(ctx)),
      }),
    rest: {
      method: 'POST',
      path: `/manifests/:id/${path}`,
      mount: 'root',
      tag,
      summary,
      auth: ['bearer'],
      extraErrors: ['409'],
    },
  }),
);

const marketplaceManifestsQuery = query('marketplace_manifests', {
  field: (t) =>
    t.field({
      type: MarketplaceListRef,
      description: 'Published templates of every organization, newest first.',
      args: {
        ...pageArgs,
        category: t.arg.string(),
        min_price: t.arg.string({ description: 'Inclusive; a decimal with at most two places.' }),
        max_price: t.arg.string({ description: 'Inclusive; not below min_price.' }),
        q: t.arg.string({ description: 'Words in the name or description (case-insensitive).' }),
      },
      authScopes: read,
      resolve: (_, args, ctx) => ctx.services.templates.browse(args),
    }),
  rest: {
    method: 'GET',
    path: '/marketplace/manifests',
    mount: 'root',
    tag,
    summary: 'Browse the marketplace',
    auth: ['bearer'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const templateOperations = [
  createManifestTemplateMutation,
  manifestTemplatesQuery,
  manifestTemplateQuery,
  ...templateTransitions,
  marketplaceManifestsQuery,
];
