// The tools a tenant's MCP servers lend its plans: for each connection of
// kind `mcp`, its server's tools (`mcpTools`, asked of the server when the
// list is opened, not with each read of the page), with the key a plan
// step names and a summary of the arguments.

import { useState } from "react";
import { useQuery } from "urql";

import { graphql } from "../graphql";
import { Empty, ErrorBox, Json, Loading } from "../ui";

const TOOLS = graphql(`
  query McpTools($connection: String!) {
    mcpTools(connection: $connection) {
      key
      name
      description
      inputSchema
    }
  }
`);

export function McpCatalogue({ connections }: { connections: string[] }) {
  if (connections.length === 0) return null;
  return (
    <>
      <h2>Tools from MCP servers</h2>
      {connections.map((name) => (
        <ServerTools key={name} connection={name} />
      ))}
    </>
  );
}

function ServerTools({ connection }: { connection: string }) {
  const [asked, setAsked] = useState(false);
  const [{ data, error, fetching }] = useQuery({
    query: TOOLS,
    variables: { connection },
    pause: !asked,
    requestPolicy: "network-only",
  });
  if (!asked) {
    return (
      <p>
        <button type="button" onClick={() => setAsked(true)}>
          List the tools of {connection}
        </button>
      </p>
    );
  }
  if (error) return <ErrorBox error={error} />;
  if (fetching || !data) return <Loading what={`the tools of ${connection}`} />;
  if (data.mcpTools.length === 0) return <Empty>{connection} offers no tools.</Empty>;
  return (
    <table className="list" aria-label={`Tools of ${connection}`}>
      <thead>
        <tr>
          <th scope="col">Key (for plan steps)</th>
          <th scope="col">Description</th>
          <th scope="col">Arguments</th>
        </tr>
      </thead>
      <tbody>
        {data.mcpTools.map((tool) => (
          <tr key={tool.key} data-testid="mcp-tool">
            <td>
              <code>{tool.key}</code>
            </td>
            <td>{tool.description}</td>
            <td>
              <Json value={tool.inputSchema} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
