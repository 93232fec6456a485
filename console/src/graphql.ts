// The console's GraphQL operations, typed against the repository's
// `schema.graphql`: `graphql(…)` parses an operation in the type system and
// gives its result and variables types from `graphql-env.d.ts` (generated
// from the schema by `npm run schema`), so a schema change that breaks a
// page fails `tsc`, hence the console's build. Fragments are not masked.

import { initGraphQLTada } from "gql.tada";

import type { introspection } from "./graphql-env.d.ts";

export const graphql = initGraphQLTada<{
  introspection: introspection;
  scalars: { DateTime: string; JSON: unknown };
  disableMasking: true;
}>();

export type { FragmentOf, ResultOf, VariablesOf } from "gql.tada";
