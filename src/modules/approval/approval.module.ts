import type { ApiModule } from '../../api/api-module.js';
import { byIdLoader, type LoaderFactories, type LoadersMadeBy } from '../../api/request-loaders.js';
import { approvalOperations } from './approval.graphql.js';

const approvalLoaders = {
  /** Approvals that records name. */
  approvalById: (services) => byIdLoader((orgId, ids) => services.approvals.byIds(orgId, ids)),
} satisfies LoaderFactories;

export const approvalModule: ApiModule = {
  name: 'approval',
  operations: approvalOperations,
  loaders: approvalLoaders,
  jobs: [
    {
      failure: 'approval expiry sweep failed',
      everyMs: (env) => env.approvalSweepSeconds * 1000,
      run: (services) => services.approvals.expireDue(),
    },
  ],
};

type ApprovalLoaders = LoadersMadeBy<typeof approvalLoaders>;
declare module '../../api/services.js' {
  interface Loaders extends ApprovalLoaders {}
}
