import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Response } from './fetch-api.js';

/**
 * Swagger UI at /docs and ReDoc at /redoc, with their assets served from the npm packages so the
 * pages work without access to a CDN.
 */

const require = createRequire(import.meta.url);
const swaggerDir = path.dirname(require.resolve('swagger-ui-dist/package.json'));
const redocBundle = path.join(path.dirname(require.resolve('redoc/package.json')), 'bundles', 'redoc.standalone.js');

const assets: Record<string, { file: string; type: string }> = {
  '/docs/swagger-ui.css': { file: path.join(swaggerDir, 'swagger-ui.css'), type: 'text/css' },
  '/docs/swagger-ui-bundle.js': { file: path.join(swaggerDir, 'swagger-ui-bundle.js'), type: 'text/javascript' },
  '/docs/swagger-ui-standalone-preset.js': {
    file: path.join(swaggerDir, 'swagger-ui-standalone-preset.js'),
    type: 'text/javascript',
  },
  '/docs/favicon-32x32.png': { file: path.join(swaggerDir, 'favicon-32x32.png'), type: 'image/png' },
  '/redoc/redoc.standalone.js': { file: redocBundle, type: 'text/javascript' },
};

const swaggerPage = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Agent Gateway API</title>
  <link rel="stylesheet" href="/docs/swagger-ui.css">
  <link rel="icon" type="image/png" href="/docs/favicon-32x32.png">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/swagger-ui-bundle.js"></script>
  <script src="/docs/swagger-ui-standalone-preset.js"></script>
  <script>
    window.ui = SwaggerUIBundle({
      url: '/openapi.json',
      dom_id: '#swagger-ui',
      deepLinking: true,
      displayOperationId: true,
      presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
      layout: 'StandaloneLayout',
    });
  </script>
</body>
</html>`;

const redocPage = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Agent Gateway API</title>
  <meta name="viewport" content="width=device-width, initial-scale=1">
</head>
<body>
  <redoc spec-url="/openapi.json"></redoc>
  <script src="/redoc/redoc.standalone.js"></script>
</body>
</html>`;

const cache = new Map<string, Buffer>();

export async function serveDocs(pathname: string, openapi: unknown): Promise<Response | undefined> {
  if (pathname === '/openapi.json') return Response.json(openapi);
  if (pathname === '/docs' || pathname === '/docs/') {
    return new Response(swaggerPage, { headers: { 'Content-Type': 'text/html; charset=utf-8' } });
  }
  if (pathname === '/redoc' || pathname === '/redoc/') {
    return new Response(redocPage, { headers: { 'Content-Type': 'text/html; charset=utf-8' } });
  }
  const asset = assets[pathname];
  if (!asset) return undefined;
  let body = cache.get(pathname);
  if (!body) {
    body = await readFile(asset.file);
    cache.set(pathname, body);
  }
  return new Response(new Uint8Array(body), {
    headers: { 'Content-Type': asset.type, 'Cache-Control': 'public, max-age=86400' },
  });
}
