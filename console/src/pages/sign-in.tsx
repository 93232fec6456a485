// Sign in with a bearer token (or an API key). On the embedded default,
// mint one with `brainstem token --tenant demo --role TENANT_ADMIN`.

import { useState } from "react";

export function SignIn({ onToken }: { onToken: (token: string) => void }) {
  const [token, setToken] = useState("");
  return (
    <main className="signin">
      <h1>Brainstem console</h1>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (token.trim()) onToken(token.trim());
        }}
      >
        <label htmlFor="token">Bearer token or API key</label>
        <textarea
          id="token"
          name="token"
          rows={4}
          value={token}
          onChange={(e) => setToken(e.target.value)}
          placeholder="eyJhbGciOi…"
        />
        <button type="submit" disabled={!token.trim()}>
          Sign in
        </button>
      </form>
      <p className="hint">
        Running the embedded default? Mint a token with{" "}
        <code>cargo run --release -- token --tenant demo --role TENANT_ADMIN</code> and paste it
        here. It stays in this tab only.
      </p>
    </main>
  );
}
