import type { Env } from '../env.js';
import type { Operation } from './operations.js';
import type { LoaderFactories } from './request-loaders.js';
import type { Services } from './services.js';
import type { StreamRoute } from './stream-routes.js';

/**
 * What a module contributes, said in one place (its `*.module.ts`): its operations (each a field
 * with its REST route), its streamed routes, its request loaders and its periodic jobs. The edge
 * registers the modules of src/modules/modules.ts, in their order (src/http/schema.ts for the
 * operations and routes, src/app.ts for the loaders and jobs); nothing registers itself by being
 * imported.
 */
export interface ApiModule {
  /** The module's folder under src/modules/. */
  readonly name: string;
  readonly operations: readonly Operation[];
  /** Routes too large to answer from one field's JSON (exports), served and documented beside the operations. */
  readonly streams?: readonly StreamRoute[];
  /**
   * Request-scoped DataLoaders by name (`ctx.loaders.<name>`); the module's `declare module` adds
   * their types to `Loaders` (src/api/services.ts).
   */
  readonly loaders?: LoaderFactories;
  readonly jobs?: readonly PeriodicJob[];
}

/** Work the app runs every so often while it serves (src/app.ts), in every process. */
export interface PeriodicJob {
  /** What the warning says when a run fails. */
  readonly failure: string;
  /** How long between runs, from the deployment's settings. */
  readonly everyMs: (env: Env) => number;
  readonly run: (services: Services) => Promise<unknown>;
}

/** How often modules delete what has expired and can no longer be presented (maintenance). */
export const MAINTENANCE_EVERY_MS = 10 * 60 * 1000;
