import type { ApiModule } from '../../api/api-module.js';
import { byIdLoader, type LoaderFactories, type LoadersMadeBy } from '../../api/request-loaders.js';
import { userOperations } from './user.graphql.js';

const userLoaders = {
  /** Audit actors that are users. */
  userById: (services) => byIdLoader((orgId, ids) => services.users.byIds(orgId, ids)),
} satisfies LoaderFactories;

export const userModule: ApiModule = {
  name: 'user',
  operations: userOperations,
  loaders: userLoaders,
};

type UserLoaders = LoadersMadeBy<typeof userLoaders>;
declare module '../../api/services.js' {
  interface Loaders extends UserLoaders {}
}
