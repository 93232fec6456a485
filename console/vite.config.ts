// The console is served by the Brainstem binary under /console/. Two
// pages, each its own entry: the console (index.html) and GraphiQL
// (graphiql.html), so neither loads the other's code.
import { defineConfig } from "vite";

export default defineConfig({
  base: "/console/",
  build: {
    outDir: process.env.CONSOLE_OUT_DIR ?? "dist",
    emptyOutDir: true,
    target: "es2022",
    // GraphiQL's large chunks (Monaco and its workers) load on its page only.
    chunkSizeWarningLimit: 4096,
    rolldownOptions: {
      input: { index: "index.html", graphiql: "graphiql.html" },
      onwarn(warning, warn) {
        // GraphiQL's packages mark modules "use client" for server-side
        // React frameworks; in a browser-only bundle it means nothing.
        if (warning.code === "MODULE_LEVEL_DIRECTIVE") return;
        warn(warning);
      },
    },
  },
});
