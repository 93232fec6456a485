//! The agent model's prompts that `local_models` (candle) and `llama_cpp`
//! (llama.cpp) both time, so the two engines read the very same requests:
//! a plain generation, an agent prompt offering five tools asked four
//! questions (cold, then with the system turn and tools already read), and
//! three questions each answered with a tool call.

use brainstem_domain::llm::{CompletionRequest, Message, ToolSpec, prompt};
use serde_json::json;

/// The plain generation's question (no tools).
pub const GENERATION: &str = "Explain what a vector database is and when a team should use one.";

/// Questions asked after the same system turn and tools: the first read is
/// cold, the others share its beginning.
pub const FIRST_TOKEN_QUESTIONS: [&str; 4] = [
    "What is Maria Lopez allergic to?",
    "Remember that the Berlin office closes at 6pm on Fridays.",
    "Fetch https://api.example.com/orders/42 and tell me its status.",
    "Which depot ships to Lisbon?",
];

/// Questions answered with a tool call, and the tool expected.
pub const CALLS: [(&str, &str); 3] = [
    ("What is Maria Lopez allergic to?", "memory_recall"),
    (
        "Remember that the Berlin office closes at 6pm on Fridays.",
        "memory_remember",
    ),
    (
        "Fetch https://api.example.com/orders/42 and tell me its status.",
        "http_request",
    ),
];

/// The plain generation for `model`, greedy.
pub fn generation(model: &str, max_tokens: u32) -> CompletionRequest {
    CompletionRequest {
        messages: vec![Message::user(GENERATION)],
        model: model.into(),
        max_tokens,
        temperature: 0.0,
        tools: Vec::new(),
    }
}

/// An agent step's prompt for `question`: the platform's core rules and
/// tool guardrail, the five tools, the question; greedy.
pub fn agent_step(model: &str, question: &str, max_tokens: u32) -> CompletionRequest {
    CompletionRequest {
        messages: prompt::for_call(
            vec![
                Message::system(prompt::IMMUTABLE_CORE),
                Message::user(question),
            ],
            true,
        ),
        model: model.into(),
        max_tokens,
        temperature: 0.0,
        tools: five_tools(),
    }
}

/// The bare question with the five tools (no platform rules); greedy.
pub fn tool_call(model: &str, question: &str, max_tokens: u32) -> CompletionRequest {
    CompletionRequest {
        messages: vec![Message::user(question)],
        model: model.into(),
        max_tokens,
        temperature: 0.0,
        tools: five_tools(),
    }
}

/// Five tools as an agent step offers them.
pub fn five_tools() -> Vec<ToolSpec> {
    let object = |properties: serde_json::Value, required: &[&str]| json!({"type": "object", "properties": properties, "required": required});
    vec![
        ToolSpec {
            name: "memory_recall".into(),
            description: "Search the stored memories for facts relevant to a query.".into(),
            parameters: object(json!({"query": {"type": "string"}}), &["query"]),
        },
        ToolSpec {
            name: "memory_remember".into(),
            description: "Store a fact as a memory.".into(),
            parameters: object(json!({"content": {"type": "string"}}), &["content"]),
        },
        ToolSpec {
            name: "http_request".into(),
            description: "Call an HTTP endpoint.".into(),
            parameters: object(
                json!({"url": {"type": "string"}, "method": {"type": "string"}}),
                &["url"],
            ),
        },
        ToolSpec {
            name: "graph_neighbourhood".into(),
            description: "Entities related to a named entity in the knowledge graph.".into(),
            parameters: object(json!({"name": {"type": "string"}}), &["name"]),
        },
        ToolSpec {
            name: "current_time".into(),
            description: "The current date and time.".into(),
            parameters: object(json!({}), &[]),
        },
    ]
}
