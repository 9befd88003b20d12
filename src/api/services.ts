/**
 * What a request reaches through its context, as the API layer names it: the modules' services
 * and the request's loaders. The code above the modules fills these in (`declare module` in
 * src/services.ts and src/loaders.ts), so that this layer names what they build without importing
 * them (docs/decisions/0065-one-layer-per-folder.md).
 */
// biome-ignore lint/suspicious/noEmptyInterface: filled in by src/services.ts
export interface Services {}
// biome-ignore lint/suspicious/noEmptyInterface: filled in by src/loaders.ts
export interface Loaders {}
