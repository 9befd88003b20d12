/**
 * The layers and the module boundaries `npm run lint` holds (docs/architecture.md, "Layout" and
 * "Modules"). Below the modules lie the permission table (src/authz/) and the API toolkit
 * (src/api/); above them, the edge (src/http/) and what builds them. A module is entered through
 * its service; its GraphQL types are public so that other modules' schema can refer to them; a few
 * pure files are public too, listed once here. Everything else in a module, its store above all,
 * is the module's own.
 */
const PUBLIC_FILES = [
  '\\.service\\.ts$',
  '\\.graphql\\.ts$',
  '\\.module\\.ts$',
  '^src/modules/modules\\.ts$',
  // The password rules that sign-up, users and sessions share (the permission table is src/authz/, below the modules).
  '^src/modules/auth/password\\.ts$',
  // The typed union of audit events every audited write names.
  '^src/modules/audit/audit-events\\.ts$',
  // Pure rules shared with the decision, the CLI's offline verifier and the console.
  '^src/modules/gateway/decision\\.ts$',
  '^src/modules/policy/(policy-rules|policy-condition|policy-condition-budget|content-detectors)\\.ts$',
  '^src/modules/manifest/manifest-document\\.ts$',
  '^src/modules/record/(record-chain|record-export)\\.ts$',
  '^src/modules/tool/connectors\\.ts$',
];

/** The modules, the edge and what builds them: nothing below the modules imports these. */
const MODULES_AND_ABOVE = '^src/(modules|http|cli)/|^src/(services|loaders|app|main)\\.ts$';

/** The composition root and the HTTP edge build the modules, so they may reach their constructors. */
const WIRING = '^src/(services|app)\\.ts$|^src/(http|cli)/';

module.exports = {
  forbidden: [
    {
      name: 'store-of-another-folder',
      comment: "A store's statements are its module's: other code calls the module's service.",
      severity: 'error',
      from: { path: '^(src/.+)/[^/]+$' },
      to: { path: '\\.store\\.ts$', pathNot: '^$1/[^/]+$' },
    },
    {
      name: 'module-internals',
      comment: 'A module uses another only through its service, its GraphQL types or a public pure file.',
      severity: 'error',
      from: { path: '^src/modules/([^/]+)/' },
      to: { path: '^src/modules/', pathNot: ['^src/modules/$1/', ...PUBLIC_FILES] },
    },
    {
      name: 'internals-from-outside',
      comment: 'Code outside the modules calls their services; only the wiring builds them from their parts.',
      severity: 'error',
      from: { path: '^src/', pathNot: ['^src/modules/', WIRING] },
      to: { path: '^src/modules/', pathNot: PUBLIC_FILES },
    },
    {
      name: 'module-imports-edge',
      comment:
        'Modules declare their fields and routes with src/api/ and never reach the HTTP edge, not even for a type: services take what they need as arguments (docs/decisions/0065-one-layer-per-folder.md).',
      severity: 'error',
      from: { path: '^src/modules/' },
      to: { path: '^src/http/' },
    },
    {
      name: 'api-imports-above',
      comment:
        'src/api/ (the Pothos toolkit, the route declarations, the request types) lies below the modules: it imports neither a module, nor the edge, nor what builds them, not even for a type.',
      severity: 'error',
      from: { path: '^src/api/' },
      to: { path: MODULES_AND_ABOVE },
    },
    {
      name: 'authz-imports-above',
      comment:
        'The permission table (src/authz/) lies below everything that checks against it: it imports no module, no API toolkit and no edge, not even for a type.',
      severity: 'error',
      from: { path: '^src/authz/' },
      to: { path: [MODULES_AND_ABOVE, '^src/api/'] },
    },
    {
      name: 'no-circular',
      comment: 'Files that import each other in a loop cannot be read, tested or moved one at a time.',
      severity: 'error',
      from: { path: '^src/' },
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^src/generated/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
