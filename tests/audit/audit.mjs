// Runs the graphql-http package's server audits against one GraphQL endpoint
// and prints one JSON object per audit on its own line:
//   {"id": "…", "name": "…", "status": "ok" | "notice" | "warn" | "error", "reason": "…"}
// Usage: node audit.mjs http://127.0.0.1:PORT/graphql [Authorization header value]
// The modules come from the folder GRAPHQL_HTTP_AUDIT_DIR, where scripts/test
// installs this folder's package.json (outside the clone, cached).
import { createRequire } from 'node:module';

const [url, authorization] = process.argv.slice(2);
if (!url) {
  console.error('usage: node audit.mjs URL [AUTHORIZATION]');
  process.exit(2);
}
const require = createRequire(`${process.env.GRAPHQL_HTTP_AUDIT_DIR ?? '.'}/package.json`);
const { auditServer } = require('graphql-http');

const fetchFn = (input, init = {}) => {
  const headers = new Headers(init.headers);
  if (authorization) headers.set('authorization', authorization);
  return fetch(input, { ...init, headers });
};

const results = await auditServer({ url, fetchFn });
for (const result of results) {
  const { id, name, status } = result;
  const reason = 'reason' in result ? result.reason : undefined;
  console.log(JSON.stringify({ id, name, status, reason }));
}
