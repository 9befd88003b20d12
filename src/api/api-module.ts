import type { Operation } from './operations.js';
import type { StreamRoute } from './stream-routes.js';

/**
 * What a module contributes to the API, said in one place (its `*.module.ts`): its operations
 * (each a field with its REST route) and its streamed routes. The edge's schema assembly
 * (src/http/schema.ts) registers the modules of src/modules/modules.ts, in their order; nothing
 * registers itself by being imported.
 */
export interface ApiModule {
  /** The module's folder under src/modules/. */
  readonly name: string;
  readonly operations: readonly Operation[];
  /** Routes too large to answer from one field's JSON (exports), served and documented beside the operations. */
  readonly streams?: readonly StreamRoute[];
}
