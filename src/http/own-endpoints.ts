import type { Plugin } from 'graphql-yoga';
import type { Response } from '../api/fetch-api.js';
import type { ServerContext } from './lifecycle.js';

/**
 * Endpoints the service answers itself, in front of GraphQL and SOFA, because their wire is not
 * the API's: OAuth's (RFC 6749 errors, redirects) and single sign-on's (browser redirects, pages).
 * Each says which paths are its own, how it answers, what a throw becomes and the route it names.
 */
export interface OwnEndpoints {
  /** Synchronous: every other request passes here and pays no promise for it. */
  ours(pathname: string): boolean;
  answer(request: Request, url: URL, clientAddress: string): Promise<Response>;
  /** What a throw from `answer` becomes: a refusal in the endpoints' own format, never a stack. */
  failure(request: Request, error: unknown, requestId: string | undefined): Response;
  /** The path as logs and metrics name it: a pattern, never an id from the path. */
  route(pathname: string): string;
}

export function useOwnEndpoints(endpoints: OwnEndpoints): Plugin<{}, ServerContext> {
  return {
    onRequest({ request, url, serverContext, endResponse }) {
      if (!endpoints.ours(url.pathname)) return;
      const state = serverContext.state;
      return endpoints.answer(request, url, state?.clientAddress ?? 'unknown').then(
        (response) => respond(response),
        (error: unknown) => respond(endpoints.failure(request, error, state?.requestId)),
      );
      function respond(response: Response) {
        if (state) state.route = `${request.method} ${endpoints.route(url.pathname)}`;
        endResponse(response);
      }
    },
  };
}
