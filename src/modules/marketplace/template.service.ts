import type { Deps } from '../../deps.js';
import { AppError, FieldErrors, notFound, validationError } from '../../errors.js';
import { Prisma, type ManifestTemplate } from '../../generated/prisma/client.js';
import { canonicalHash } from '../../lib/canonical-json.js';
import { isUuid } from '../../lib/ids.js';
import { likeLiteral } from '../../lib/like-literal.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { principalName, type Principal } from '../../authz/authz.js';
import { checkManifest } from '../manifest/manifest-document.js';
import {
  browseTemplates,
  findTemplateOfOrg,
  findTemplateWithOrg,
  findTemplateWithOrgOrThrow,
  insertTemplate,
  listTemplates,
  transitionTemplate,
  type TemplateWithOrg,
} from './template.store.js';

/**
 * Manifest templates (docs/decisions/0021-templates-and-marketplace.md): an org's reusable agent definitions,
 * drafted, published to the marketplace and archived. Content is fixed at creation, so its
 * `content_hash` names exactly what a buyer acquires. Prices are exact decimals end to end: parsed
 * from text, stored as NUMERIC(12,2), shown as strings.
 */

export const templateStatuses = ['draft', 'published', 'archived'] as const;
export type TemplateStatus = (typeof templateStatuses)[number];

const MAX_NAME = 200;
const MAX_DESCRIPTION = 5000;
const MAX_OPERATIONS = 100;
const MAX_OPERATION_DESCRIPTION = 1000;
const DEFAULT_PAGE_SIZE = 20;
const MAX_PAGE_SIZE = 100;
const categoryPattern = /^[a-z0-9]+(-[a-z0-9]+)*$/;
/** Up to 10 integer digits and 2 decimals: what NUMERIC(12,2) holds. */
const pricePattern = /^\d{1,10}(\.\d{1,2})?$/;
const currencies = new Set(Intl.supportedValuesOf('currency'));

export interface TemplateInput {
  name?: string | null;
  description?: string | null;
  category?: string | null;
  operations?: unknown;
  price?: unknown;
  currency?: string | null;
  constraints?: unknown;
}

export interface Operation {
  capability: string;
  description: string;
}

export interface TemplatePage {
  page?: number | null;
  limit?: number | null;
}

export interface MarketplaceFilter extends TemplatePage {
  category?: string | null;
  min_price?: string | null;
  max_price?: string | null;
  q?: string | null;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * A price as exact text with two decimals, from a decimal string or a JSON number; null when it is
 * not a non-negative amount with at most two decimal places.
 */
export function parsePrice(value: unknown): string | null {
  const text =
    typeof value === 'number' && Number.isFinite(value)
      ? String(value)
      : typeof value === 'string'
        ? value.trim()
        : null;
  if (text === null || !pricePattern.test(text)) return null;
  const [units, cents = ''] = text.split('.');
  return `${BigInt(units)}.${cents.padEnd(2, '0')}`;
}

export const priceText = (price: Prisma.Decimal) => price.toFixed(2);
export const operationsOf = (template: ManifestTemplate) => template.operations as unknown as Operation[];

/**
 * The operations and constraints checked by the manifests' own rules: they become a manifest's
 * requested capabilities and constraints when a template is purchased.
 */
function checkContent(operations: Operation[], constraints: unknown, errors: FieldErrors) {
  const probe = checkManifest({
    version: '1.0',
    agent: { id: 'template', name: 'template', version: '1.0.0' },
    capabilities: { requested: operations.map((o) => o.capability) },
    ...(constraints === undefined || constraints === null ? {} : { constraints }),
  });
  for (const error of probe.errors) {
    if (error.field.startsWith('capabilities.requested'))
      errors.add(error.field.replace('capabilities.requested', 'operations'), error.message);
    else if (error.field.startsWith('constraints')) errors.add(error.field, error.message);
  }
}

function checkOperations(raw: unknown, errors: FieldErrors): Operation[] {
  if (!Array.isArray(raw) || raw.length < 1 || raw.length > MAX_OPERATIONS) {
    errors.add('operations', `must be a list of 1 to ${MAX_OPERATIONS} capabilities or {capability, description}`);
    return [];
  }
  const operations: Operation[] = [];
  raw.forEach((entry, i) => {
    const field = `operations[${i}]`;
    if (typeof entry === 'string') operations.push({ capability: entry, description: '' });
    else if (isObject(entry) && typeof entry.capability === 'string') {
      const description = entry.description ?? '';
      if (typeof description !== 'string' || description.length > MAX_OPERATION_DESCRIPTION) {
        errors.add(`${field}.description`, `must be a string of at most ${MAX_OPERATION_DESCRIPTION} characters`);
      }
      for (const key of Object.keys(entry))
        if (key !== 'capability' && key !== 'description') errors.add(`${field}.${key}`, 'unknown field');
      operations.push({ capability: entry.capability, description: String(description) });
    } else errors.add(field, 'must be a capability string or {capability, description}');
  });
  // Duplicates and the capability format are the manifests' rules (checkContent).
  return operations;
}

function validate(input: TemplateInput) {
  const errors = new FieldErrors();
  const name = input.name?.trim() ?? '';
  if (!name || name.length > MAX_NAME) errors.add('name', `must be 1 to ${MAX_NAME} characters`);
  const description = input.description?.trim() ?? '';
  if (description.length > MAX_DESCRIPTION) errors.add('description', `must be at most ${MAX_DESCRIPTION} characters`);
  const category = input.category ?? '';
  if (!categoryPattern.test(category) || category.length > 64)
    errors.add('category', 'must be a lowercase slug (letters, digits, single hyphens), at most 64 characters');
  const operations = checkOperations(input.operations, errors);
  if (input.constraints !== undefined && input.constraints !== null && !isObject(input.constraints))
    errors.add('constraints', 'must be an object');
  else if (operations.length) checkContent(operations, input.constraints, errors);
  const price = input.price === undefined || input.price === null ? '0.00' : parsePrice(input.price);
  if (price === null)
    errors.add('price', 'must be an amount ≥ 0 with at most two decimal places, as a string ("12.50") or a number');
  const currency = input.currency ?? 'USD';
  if (!currencies.has(currency))
    errors.add('currency', 'must be an ISO 4217 currency code in capitals, e.g. "USD" or "EUR"');
  errors.throwIfAny();
  const constraints = isObject(input.constraints) ? input.constraints : null;
  return { name, description, category, operations, constraints, price: price!, currency };
}

function pageOf(filter: TemplatePage) {
  const errors = new FieldErrors();
  const page = filter.page ?? 1;
  const limit = filter.limit ?? DEFAULT_PAGE_SIZE;
  if (!Number.isInteger(page) || page < 1) errors.add('page', 'must be 1 or more');
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE_SIZE)
    errors.add('limit', `must be from 1 to ${MAX_PAGE_SIZE}`);
  errors.throwIfAny();
  return { page, limit, skip: (page - 1) * limit };
}

const pagination = (page: number, limit: number, total: number) => ({
  page,
  limit,
  total,
  pages: Math.ceil(total / limit),
});

const snapshotOf = (t: ManifestTemplate) => ({
  name: t.name,
  category: t.category,
  status: t.status,
  price: priceText(t.price),
  currency: t.currency,
  content_hash: t.contentHash,
});

const templateNotFound = () => notFound('Manifest template');

export function createTemplateService({ db }: Deps) {
  async function create(orgId: string, input: TemplateInput, principal: Principal): Promise<ManifestTemplate> {
    const content = validate(input);
    const contentHash = canonicalHash({
      name: content.name,
      description: content.description,
      category: content.category,
      operations: content.operations,
      constraints: content.constraints,
    });
    const actor = actorOf(principal);
    return db.prisma.$transaction(async (tx) => {
      const template = await insertTemplate(tx, {
        orgId,
        name: content.name,
        description: content.description,
        category: content.category,
        operations: content.operations,
        constraints: content.constraints,
        price: content.price,
        currency: content.currency,
        contentHash,
        createdBy: principalName(principal),
      });
      await recordAudit(tx, orgId, actor, {
        action: 'template.created',
        targetType: 'manifest_template',
        targetId: template.id,
        after: snapshotOf(template),
      });
      return template;
    });
  }

  async function list(orgId: string, filter: TemplatePage & { status?: string | null }) {
    const { page, limit, skip } = pageOf(filter);
    if (filter.status && !templateStatuses.includes(filter.status as TemplateStatus)) {
      throw validationError([{ field: 'status', message: `must be one of ${templateStatuses.join(', ')}` }]);
    }
    const { items, total } = await listTemplates(db.prisma, { orgId, status: filter.status }, { take: limit, skip });
    return { manifests: items, pagination: pagination(page, limit, total) };
  }

  /** The org's own template in any status, or another org's published one; anything else is 404. */
  async function get(orgId: string, id: string): Promise<TemplateWithOrg> {
    if (!isUuid(id)) throw templateNotFound();
    const template = await findTemplateWithOrg(db.prisma, id);
    if (!template || (template.orgId !== orgId && template.status !== 'published')) throw templateNotFound();
    return template;
  }

  /** Publishing (from draft or archived) and archiving (from draft or published) the org's own template. */
  async function transition(orgId: string, id: string, to: 'published' | 'archived', principal: Principal) {
    const from: TemplateStatus[] = to === 'published' ? ['draft', 'archived'] : ['draft', 'published'];
    return db.prisma.$transaction(async (tx) => {
      const before = await findTemplateOfOrg(tx, orgId, id);
      if (!before) throw templateNotFound();
      if (!(await transitionTemplate(tx, { orgId, id, from }, to))) {
        throw new AppError('INVALID_STATE_TRANSITION', `The template is ${before.status}`, {
          details: { from: before.status, to },
        });
      }
      const after = await findTemplateWithOrgOrThrow(tx, id);
      await recordAudit(tx, orgId, actorOf(principal), {
        action: to === 'published' ? 'template.published' : 'template.archived',
        targetType: 'manifest_template',
        targetId: id,
        before: snapshotOf(before),
        after: snapshotOf(after),
      });
      return after;
    });
  }

  /** Published templates of every org, with the categories (and counts) the other filters leave. */
  async function browse(filter: MarketplaceFilter) {
    const { page, limit, skip } = pageOf(filter);
    const errors = new FieldErrors();
    const min = filter.min_price == null ? null : parsePrice(filter.min_price);
    const max = filter.max_price == null ? null : parsePrice(filter.max_price);
    if (filter.min_price != null && min === null)
      errors.add('min_price', 'must be an amount ≥ 0 with at most two decimal places');
    if (filter.max_price != null && max === null)
      errors.add('max_price', 'must be an amount ≥ 0 with at most two decimal places');
    if (min !== null && max !== null && new Prisma.Decimal(min).greaterThan(new Prisma.Decimal(max))) {
      errors.add('min_price', 'must not be greater than max_price');
    }
    errors.throwIfAny();
    const search = filter.q?.trim();
    const { items, total, categories } = await browseTemplates(
      db.prisma,
      { minPrice: min, maxPrice: max, search: search ? likeLiteral(search) : undefined, category: filter.category },
      { take: limit, skip },
    );
    return {
      manifests: items,
      filters: {
        category: filter.category ?? null,
        min_price: min,
        max_price: max,
        categories,
      },
      pagination: pagination(page, limit, total),
    };
  }

  return { create, list, get, transition, browse };
}

export type TemplateService = ReturnType<typeof createTemplateService>;
