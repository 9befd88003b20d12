import type { ApiModule } from '../../api/api-module.js';
import { recordOperations, recordStreams } from './record.graphql.js';

export const recordModule: ApiModule = {
  name: 'record',
  operations: recordOperations,
  streams: recordStreams,
};
