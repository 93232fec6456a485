// The console is served by the Brainstem binary under /console/.
import { defineConfig } from "vite";

export default defineConfig({
  base: "/console/",
  build: {
    outDir: process.env.CONSOLE_OUT_DIR ?? "dist",
    emptyOutDir: true,
    target: "es2022",
  },
});
