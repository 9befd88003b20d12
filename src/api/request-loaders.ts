import DataLoader from 'dataloader';
import type { Loaders, Services } from './services.js';

/**
 * Makes one request's loader of a name, from the services and the request's other loaders (a
 * loader may build on another: an agent's usage on its current manifest). A factory that uses
 * another loader names the type of what it uses (its `loaders` parameter) from that loader's
 * module: typed as `Loaders`, which every module's loaders make up, the type would depend on itself.
 */
export type LoaderFactory = (services: Services, loaders: never) => unknown;

/** A module's loaders by name, as its `*.module.ts` contributes them (src/api/api-module.ts). */
export type LoaderFactories = Readonly<Record<string, LoaderFactory>>;

/** The loaders a module's factories make, by name: what its `declare module` adds to `Loaders`. */
export type LoadersMadeBy<Factories extends LoaderFactories> = {
  readonly [Name in keyof Factories]: ReturnType<Factories[Name]>;
};

/**
 * Request-scoped DataLoaders from every module's factories: a list of N items asking for the same
 * relation costs one query. Made per request, so nothing is cached across callers or after a
 * write. Each loader is made on first use: most requests use none or one. The loaders are getters
 * of the prototype, not own properties, so that copying the object (the context is copied by
 * spreading) makes none of them.
 */
export function requestLoaders(factories: ReadonlyMap<string, LoaderFactory>): (services: Services) => Loaders {
  class RequestLoaders {
    readonly #services: Services;
    readonly #made = new Map<string, unknown>();

    constructor(services: Services) {
      this.#services = services;
    }

    made(name: string): unknown {
      let loader = this.#made.get(name);
      if (loader === undefined) {
        const make = factories.get(name) as (services: Services, loaders: Loaders) => unknown;
        loader = make(this.#services, this as unknown as Loaders);
        this.#made.set(name, loader);
      }
      return loader;
    }
  }
  for (const name of factories.keys()) {
    Object.defineProperty(RequestLoaders.prototype, name, {
      get(this: RequestLoaders) {
        return this.made(name);
      },
    });
  }
  return (services) => new RequestLoaders(services) as unknown as Loaders;
}

/** An id within one org: loaders never return another org's row, whatever id they are given. */
export interface OrgScopedId {
  orgId: string;
  id: string;
}

const scopedKey = ({ orgId, id }: OrgScopedId) => `${orgId}\u0000${id}`;

/** One query per org for the ids asked for in one tick; results in the order of the keys. */
export function byIdLoader<Row extends { id: string }>(load: (orgId: string, ids: string[]) => Promise<Row[]>) {
  return new DataLoader<OrgScopedId, Row | null, string>(
    async (keys) => {
      const orgs = new Map<string, string[]>();
      for (const { orgId, id } of keys) orgs.set(orgId, [...(orgs.get(orgId) ?? []), id]);
      const found = new Map<string, Row>();
      for (const [orgId, ids] of orgs) {
        for (const row of await load(orgId, [...new Set(ids)])) found.set(scopedKey({ orgId, id: row.id }), row);
      }
      return keys.map((key) => found.get(scopedKey(key)) ?? null);
    },
    { cacheKeyFn: scopedKey },
  );
}
