import { useSofa } from '@graphql-yoga/plugin-sofa';
import type { Plugin } from 'graphql-yoga';
import { errorResponse, restErrorHandler, wireError } from './envelope.js';
import { REST_BASE_PATH, sofaCustomScalars } from './openapi.js';
import type { ServerContext } from './lifecycle.js';
import { restRoutes, sofaRouteConfig } from './rest-routes.js';

/**
 * The REST facade: SOFA mounts the declared routes under /api/v1. SOFA would also answer for every
 * other Query/Mutation field and for its /webhook routes, so requests are matched against the
 * declared routes first and anything else answers 404 (or 405 for a known path).
 */

interface CompiledRoute {
  method: string;
  pattern: RegExp;
  label: string;
}

function compile(): CompiledRoute[] {
  return [...restRoutes.values()].map((route) => {
    const source = route.path
      .split('/')
      .map((segment) => (segment.startsWith(':') ? '[^/]+' : segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
      .join('/');
    return {
      method: route.method,
      pattern: new RegExp(`^${REST_BASE_PATH}${source}/?$`),
      label: `${route.method} ${REST_BASE_PATH}${route.path}`,
    };
  });
}

export function useRestFacade(): Plugin<{}, ServerContext>[] {
  let routes: CompiledRoute[] | undefined;
  const guard: Plugin<{}, ServerContext> = {
    onRequest({ request, url, serverContext, endResponse, setRequest }) {
      if (url.pathname !== REST_BASE_PATH && !url.pathname.startsWith(`${REST_BASE_PATH}/`)) return;
      routes ??= compile();
      const onPath = routes.filter((r) => r.pattern.test(url.pathname));
      const route = onPath.find((r) => r.method === request.method);
      if (!route) {
        if (onPath.length) {
          const response = errorResponse(wireError('METHOD_NOT_ALLOWED', `${request.method} is not allowed here`));
          response.headers.set('Allow', onPath.map((r) => r.method).join(', '));
          endResponse(response);
        } else {
          endResponse(errorResponse(wireError('NOT_FOUND', 'No such endpoint')));
        }
        return;
      }
      serverContext.state.route = route.label;
      // Arguments of body-carrying routes come from the path and the JSON body only: SOFA would
      // otherwise also read them from the query string, where secrets end up in access logs.
      if (request.method !== 'GET' && url.search) {
        const clean = new URL(url);
        clean.search = '';
        setRequest(new Request(clean, request));
      }
    },
  };
  return [
    guard,
    useSofa({
      basePath: REST_BASE_PATH,
      routes: sofaRouteConfig(),
      customScalars: sofaCustomScalars,
      errorHandler: restErrorHandler as unknown as NonNullable<Parameters<typeof useSofa>[0]['errorHandler']>,
      openAPI: { endpoint: false },
      swaggerUI: { endpoint: false },
    }) as Plugin<{}, ServerContext>,
  ];
}
