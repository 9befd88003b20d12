import { Prisma, type ManifestTemplate } from '../../generated/prisma/client.js';

/** The statements of manifest templates (`manifest_templates`). */

/** The Prisma client, or a transaction on it. */
type Client = Prisma.TransactionClient;

/** With the publishing org's name, as the marketplace shows a template. */
const withOrgName = { org: { select: { name: true } } } as const;
export type TemplateWithOrg = ManifestTemplate & { org: { name: string } };

export interface NewTemplate {
  orgId: string;
  name: string;
  description: string;
  category: string;
  operations: readonly { capability: string; description: string }[];
  constraints: Record<string, unknown> | null;
  /** An exact decimal as text ("12.50"). */
  price: string;
  currency: string;
  contentHash: string;
  createdBy: string;
}

export function insertTemplate(tx: Client, template: NewTemplate): Promise<ManifestTemplate> {
  return tx.manifestTemplate.create({
    data: {
      ...template,
      operations: template.operations as unknown as Prisma.InputJsonValue,
      constraints: template.constraints === null ? Prisma.DbNull : (template.constraints as Prisma.InputJsonValue),
      price: new Prisma.Decimal(template.price),
    },
  });
}

/** One page of the org's templates, newest first, and how many match. */
export async function listTemplates(
  prisma: Client,
  filter: { orgId: string; status?: string | null },
  page: { take: number; skip: number },
): Promise<{ items: ManifestTemplate[]; total: number }> {
  const where: Prisma.ManifestTemplateWhereInput = {
    orgId: filter.orgId,
    ...(filter.status ? { status: filter.status } : {}),
  };
  const [items, total] = await Promise.all([
    prisma.manifestTemplate.findMany({ where, orderBy: [{ createdAt: 'desc' }, { id: 'asc' }], ...page }),
    prisma.manifestTemplate.count({ where }),
  ]);
  return { items, total };
}

export function findTemplate(prisma: Client, id: string): Promise<ManifestTemplate | null> {
  return prisma.manifestTemplate.findUnique({ where: { id } });
}

export function findTemplateOrThrow(prisma: Client, id: string): Promise<ManifestTemplate> {
  return prisma.manifestTemplate.findUniqueOrThrow({ where: { id } });
}

export function findTemplateWithOrg(prisma: Client, id: string): Promise<TemplateWithOrg | null> {
  return prisma.manifestTemplate.findUnique({ where: { id }, include: withOrgName });
}

export function findTemplateWithOrgOrThrow(prisma: Client, id: string): Promise<TemplateWithOrg> {
  return prisma.manifestTemplate.findUniqueOrThrow({ where: { id }, include: withOrgName });
}

export function findTemplateOfOrg(prisma: Client, orgId: string, id: string): Promise<ManifestTemplate | null> {
  return prisma.manifestTemplate.findFirst({ where: { id, orgId } });
}

/** Moves the org's template to `to` if its status is one of `from` (publishing stamps the time); false when not. */
export async function transitionTemplate(
  tx: Client,
  template: { orgId: string; id: string; from: readonly string[] },
  to: 'published' | 'archived',
): Promise<boolean> {
  const changed = await tx.manifestTemplate.updateMany({
    where: { id: template.id, orgId: template.orgId, status: { in: [...template.from] } },
    data: { status: to, ...(to === 'published' ? { publishedAt: new Date() } : {}) },
  });
  return changed.count > 0;
}

export interface MarketplaceQuery {
  /** Exact decimals as text; null for no bound. */
  minPrice: string | null;
  maxPrice: string | null;
  /** In the name or description, in any case, as a LIKE literal (likeLiteral). */
  search?: string;
  category?: string | null;
}

/**
 * One page of the published templates of every org, most recently published first, how many
 * match, and the categories (with counts) of those matching every filter but the category.
 */
export async function browseTemplates(prisma: Client, query: MarketplaceQuery, page: { take: number; skip: number }) {
  const { minPrice: min, maxPrice: max, search: q } = query;
  const base: Prisma.ManifestTemplateWhereInput = {
    status: 'published',
    ...(min !== null || max !== null
      ? {
          price: {
            ...(min !== null ? { gte: new Prisma.Decimal(min) } : {}),
            ...(max !== null ? { lte: new Prisma.Decimal(max) } : {}),
          },
        }
      : {}),
    ...(q
      ? {
          OR: [{ name: { contains: q, mode: 'insensitive' } }, { description: { contains: q, mode: 'insensitive' } }],
        }
      : {}),
  };
  const where = { ...base, ...(query.category ? { category: query.category } : {}) };
  const [items, total, categories] = await Promise.all([
    prisma.manifestTemplate.findMany({
      where,
      include: withOrgName,
      orderBy: [{ publishedAt: 'desc' }, { id: 'asc' }],
      ...page,
    }),
    prisma.manifestTemplate.count({ where }),
    prisma.manifestTemplate.groupBy({
      by: ['category'],
      where: base,
      _count: { _all: true },
      orderBy: { category: 'asc' },
    }),
  ]);
  return { items, total, categories: categories.map((c) => ({ category: c.category, count: c._count._all })) };
}
