import type { ApiModule } from '../../api/api-module.js';
import { recordOperations, recordStreams } from './record.graphql.js';

export const recordModule: ApiModule = {
  name: 'record',
  operations: recordOperations,
  streams: recordStreams,
  jobs: [
    {
      // Signs a checkpoint of each org whose record tree grew; every process may run it (a lock per org).
      failure: 'checkpoint sweep failed',
      everyMs: (env) => Math.max(1, env.checkpointSeconds) * 1000,
      run: (services) => services.records.log.publishDue(),
    },
  ],
};
