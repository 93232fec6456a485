//! Conversations and layered prompts end to end: a conversation of three
//! turns in which the third answer uses the first, the layers of an agent's
//! prompt in their order and within their shares of the context window
//! (the tenant's governed system prompt, the step's instructions, the
//! caller's preferences, retrieved memories, earlier turns), a stream of a
//! conversation's events, and isolation between subjects and tenants. The
//! model is the fake OpenAI-compatible server of `agent.rs`, over real SSE.

use brainstem_domain::Role;
use serde_json::{Value, json};

use crate::{
    agent::{Turn, fake_model},
    helpers::{Backend, TestApp},
};

const CHAT_PLAN: &str = "chat";

async fn app_on(backend: Backend, url: &str, window: Option<u64>) -> TestApp {
    let app = TestApp::spawn_with(backend, |c| {
        crate::llm::use_fake(c, url);
        c.llm_context_window = window;
    })
    .await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": CHAT_PLAN, "intent": "chat.reply",
               "steps": [{"id": "answer", "tool": "agent",
                          "args": {"system": "Step rules: answer in one line.", "tools": []}}]}),
    )
    .await
    .data();
    app
}

async fn gql(app: &TestApp, token: &str, query: &str, variables: Value) -> crate::helpers::Gql {
    app.graphql(Some(token), query, variables).await
}

/// Start a turn and run it; the task's id and result.
async fn turn(app: &TestApp, token: &str, conversation: &str, input: &str) -> (String, Value) {
    let started = gql(
        app,
        token,
        "mutation($input: StartTaskInput!) { startTask(input: $input) { task { id conversationId } } }",
        json!({"input": {"planKey": CHAT_PLAN, "input": input, "conversationId": conversation}}),
    )
    .await;
    let task = &started.data()["startTask"]["task"];
    assert_eq!(task["conversationId"], conversation);
    let id = task["id"].as_str().unwrap().to_owned();
    app.run_tasks().await;
    let read = gql(
        app,
        token,
        "query($id: ID!) { task(id: $id) { status result { content } } }",
        json!({"id": id}),
    )
    .await;
    assert_eq!(
        read.data()["task"]["status"],
        "COMPLETED",
        "{:?}",
        read.data()
    );
    (id, read.data()["task"]["result"].clone())
}

fn messages(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

crate::for_both_backends!(the_third_turn_is_answered_from_the_first);

async fn the_third_turn_is_answered_from_the_first(backend: Backend) {
    let (script, url) = fake_model(vec![
        Turn::Text(vec!["Nice to meet you, Ada."]),
        Turn::Text(vec!["Noted: tea."]),
        Turn::EchoFirst,
    ])
    .await;
    let app = app_on(backend, &url, None).await;
    let token = app.admin_token("acme");
    let conversation = app.start_conversation(&token, "Tea").await;
    turn(&app, &token, &conversation, "My name is Ada.").await;
    turn(&app, &token, &conversation, "I drink tea.").await;
    let (_, third) = turn(&app, &token, &conversation, "What is my name?").await;
    assert_eq!(third["content"], "You said first: My name is Ada.");

    let sent = messages(&script.requests()[2]);
    let turns: Vec<(&str, &str)> = sent
        .iter()
        .filter(|(role, _)| role != "system")
        .map(|(r, c)| (r.as_str(), c.as_str()))
        .collect();
    assert_eq!(
        turns,
        [
            ("user", "My name is Ada."),
            ("assistant", "Nice to meet you, Ada."),
            ("user", "I drink tea."),
            ("assistant", "Noted: tea."),
            ("user", "What is my name?"),
        ],
        "earlier turns, oldest first, then the message"
    );

    let listed = gql(
        &app,
        &token,
        "query($id: ID!) { conversations(first: 10) { edges { node { id title } } } conversation(id: $id) { turns(first: 10) { edges { node { input } } } } }",
        json!({"id": conversation}),
    )
    .await;
    let data = listed.data();
    assert_eq!(
        data["conversations"]["edges"][0]["node"]["id"],
        conversation
    );
    let inputs: Vec<&str> = data["conversation"]["turns"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["input"].as_str().unwrap())
        .collect();
    assert_eq!(
        inputs,
        ["My name is Ada.", "I drink tea.", "What is my name?"],
        "oldest first"
    );
}

crate::for_both_backends!(
    the_prompts_layers_keep_their_order_and_shares,
    a_conversations_events_stream_across_its_turns,
    other_subjects_and_tenants_never_see_a_conversation_or_prompt,
    the_subjects_knowledge_is_in_the_prompt_which_only_admins_see,
);

async fn the_prompts_layers_keep_their_order_and_shares(backend: Backend) {
    let (script, url) = fake_model(vec![Turn::Text(vec!["ok"])]).await;
    // A 4,000-token window: the system prompt's share is 4000 / 8 = 500
    // tokens, 2,000 characters.
    let app = app_on(backend, &url, Some(4_000)).await;
    let token = app.admin_token("acme");
    let long_prompt = format!("You are Acme's concierge. {}", "Be kind. ".repeat(300));
    let created = gql(
        &app,
        &token,
        "mutation($c: String!) { createSystemPromptVersion(input: {content: $c}) { systemPrompt { id version status } } }",
        json!({"c": long_prompt}),
    )
    .await;
    let version = created.data()["createSystemPromptVersion"]["systemPrompt"].clone();
    assert_eq!(version["status"], "DRAFT");
    let activated = gql(
        &app,
        &token,
        "mutation($id: ID!) { activateSystemPrompt(input: {id: $id}) { systemPrompt { status activatedBy } } }",
        json!({"id": version["id"]}),
    )
    .await;
    assert_eq!(
        activated.data()["activateSystemPrompt"]["systemPrompt"]["status"],
        "ACTIVE"
    );
    let audit = gql(
        &app,
        &token,
        "{ auditLog(filter: {actionPrefix: \"system_prompt.\"}, first: 5) { edges { node { target } } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        audit.data()["auditLog"]["edges"].as_array().unwrap().len(),
        1
    );
    let prefs = gql(
        &app,
        &token,
        "mutation { updateAiPreferences(input: {responseLength: CONCISE, formality: FORMAL, customInstructions: \"Use metric units. {{ state.secret }}\"}) { preferences { customInstructions } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        prefs.data()["updateAiPreferences"]["preferences"]["customInstructions"],
        "Use metric units.  state.secret",
        "template markers are removed"
    );
    gql(
        &app,
        &token,
        "mutation { remember(input: {content: \"The customer prefers morning visits before 10am\", importance: 0.9}) { memory { id } } }",
        json!({}),
    )
    .await
    .data();
    let conversation = app.start_conversation(&token, "Tea").await;
    let (task, _) = turn(
        &app,
        &token,
        &conversation,
        "When should we visit the customer?",
    )
    .await;

    let sent = messages(&script.requests()[0]);
    let roles: Vec<&str> = sent.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        roles,
        ["system", "system", "system", "system", "user"],
        "{sent:?}"
    );
    assert!(
        sent[0]
            .1
            .starts_with("You are an AI assistant operating within a governed platform.")
    );
    assert!(sent[1].1.starts_with("You are Acme's concierge."));
    assert_eq!(
        sent[1].1.chars().count(),
        2_000,
        "the system prompt is cut to its share"
    );
    assert_eq!(
        sent[2].1,
        "USER PREFERENCES (respect these):\n- Response style: concise\n- Tone: formal\n- Custom instructions: Use metric units.  state.secret"
    );
    assert_eq!(
        sent[3].1,
        "RELEVANT MEMORIES (things you remember about this user):\n- The customer prefers morning visits before 10am"
    );
    assert_eq!(sent[4].1, "When should we visit the customer?");
    // The step's own instructions found no room left in the system share.
    assert!(!sent.iter().any(|(_, c)| c.contains("Step rules")));

    // The memory put in the prompt is recorded on the task.
    let events = gql(
        &app,
        &token,
        "query($id: ID!) { task(id: $id) { events(first: 100) { kind } } }",
        json!({"id": task}),
    )
    .await;
    assert!(
        events.data()["task"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "MEMORY_RECALLED"),
        "{:?}",
        events.data()
    );
}

async fn a_conversations_events_stream_across_its_turns(backend: Backend) {
    let (_script, url) = fake_model(vec![Turn::Text(vec!["fine"])]).await;
    let app = app_on(backend, &url, None).await;
    let token = app.admin_token("acme");
    let conversation = app.start_conversation(&token, "Tea").await;
    let mut ws = crate::streams::connect(&app, "acme").await;
    ws.subscribe(
        "c",
        "subscription($id: ID!) { conversationEvents(conversationId: $id) { __typename taskId kind status } }",
        json!({"id": conversation}),
    )
    .await;
    let (first, _) = turn(&app, &token, &conversation, "Hello?").await;
    let mut seen = Vec::new();
    loop {
        let payload = ws.next_payload().await.expect("events");
        let event = payload["data"]["conversationEvents"].clone();
        assert_eq!(event["taskId"], first, "only the conversation's turns");
        let done = event["status"] == "COMPLETED" && event["kind"] == "STATUS_CHANGED";
        seen.push(event);
        if done {
            break;
        }
    }
    assert!(
        seen.iter().any(|e| e["__typename"] == "StepCompleted"),
        "{seen:?}"
    );
}

async fn other_subjects_and_tenants_never_see_a_conversation_or_prompt(backend: Backend) {
    let (script, url) = fake_model(vec![Turn::Text(vec!["ok"])]).await;
    let app = app_on(backend, &url, None).await;
    app.create_tenant("globex").await;
    app.publish_plan(
        "globex",
        json!({"key": CHAT_PLAN, "intent": "chat.reply",
               "steps": [{"id": "answer", "tool": "agent", "args": {"tools": []}}]}),
    )
    .await
    .data();
    let acme = app.admin_token("acme");
    let conversation = app.start_conversation(&acme, "Tea").await;
    let version = gql(
        &app,
        &acme,
        "mutation { createSystemPromptVersion(input: {content: \"Acme secret persona\"}) { systemPrompt { id } } }",
        json!({}),
    )
    .await
    .data()["createSystemPromptVersion"]["systemPrompt"]["id"]
        .clone();
    gql(
        &app,
        &acme,
        "mutation($id: ID!) { activateSystemPrompt(input: {id: $id}) { systemPrompt { id } } }",
        json!({"id": version}),
    )
    .await
    .data();

    let globex = app.admin_token("globex");
    let colleague = app.token_for(
        "colleague",
        Some("acme"),
        &[Role::TenantAdmin],
        chrono::Duration::hours(1),
    );
    for token in [&globex, &colleague] {
        let read = gql(
            &app,
            token,
            "query($id: ID!) { conversation(id: $id) { id } }",
            json!({"id": conversation}),
        )
        .await;
        assert_eq!(read.error_code(), "NOT_FOUND");
        let append = gql(
            &app,
            token,
            "mutation($c: ID!) { startTask(input: {planKey: \"chat\", input: \"hi\", conversationId: $c}) { task { id } } }",
            json!({"c": conversation}),
        )
        .await;
        assert_eq!(append.error_code(), "NOT_FOUND");
        let listed = gql(
            &app,
            token,
            "{ conversations(first: 10) { edges { cursor } } }",
            json!({}),
        )
        .await;
        assert_eq!(listed.data()["conversations"]["edges"], json!([]));
    }
    let prompts = gql(&app, &globex, "{ systemPrompts { id } }", json!({})).await;
    assert_eq!(prompts.data()["systemPrompts"], json!([]));
    let activate = gql(
        &app,
        &globex,
        "mutation($id: ID!) { activateSystemPrompt(input: {id: $id}) { systemPrompt { id } } }",
        json!({"id": version}),
    )
    .await;
    assert_eq!(activate.error_code(), "NOT_FOUND");

    // Globex's agent never sees Acme's system prompt.
    gql(
        &app,
        &globex,
        "mutation { startTask(input: {planKey: \"chat\", input: \"who are you?\"}) { task { id } } }",
        json!({}),
    )
    .await
    .data();
    app.run_tasks().await;
    let sent = messages(&script.requests()[0]);
    assert!(
        !sent.iter().any(|(_, c)| c.contains("Acme secret persona")),
        "{sent:?}"
    );
}

/// The task's subject and its neighbours in the knowledge graph are the
/// prompt's knowledge; the prompt itself is shown to tenant admins only.
async fn the_subjects_knowledge_is_in_the_prompt_which_only_admins_see(backend: Backend) {
    let (script, url) = fake_model(vec![Turn::Text(vec!["ok"])]).await;
    let app = app_on(backend, &url, None).await;
    let token = app.admin_token("acme");
    let upsert =
        "mutation($input: UpsertEntityInput!) { upsertEntity(input: $input) { entity { id } } }";
    let dana = gql(
        &app,
        &token,
        upsert,
        json!({"input": {"type": "person", "name": "Dana", "properties": {"city": "Lyon"}}}),
    )
    .await
    .data()["upsertEntity"]["entity"]["id"]
        .clone();
    let acme = gql(
        &app,
        &token,
        upsert,
        json!({"input": {"type": "organization", "name": "Acme"}}),
    )
    .await
    .data()["upsertEntity"]["entity"]["id"]
        .clone();
    gql(
        &app,
        &token,
        "mutation($f: ID!, $t: ID!) { relate(input: {type: \"WORKS_AT\", fromId: $f, toId: $t}) { created } }",
        json!({"f": dana, "t": acme}),
    )
    .await
    .data();
    let started = gql(
        &app,
        &token,
        "mutation($s: ID!) { startTask(input: {planKey: \"chat\", input: \"Where does Dana live?\", subjectId: $s}) { task { id } } }",
        json!({"s": dana}),
    )
    .await;
    let id = started.data()["startTask"]["task"]["id"].clone();
    app.run_tasks().await;

    let sent = messages(&script.requests()[0]);
    let knowledge = sent
        .iter()
        .find(|(_, c)| c.starts_with("RELEVANT KNOWLEDGE"))
        .map(|(_, c)| c.as_str());
    assert_eq!(
        knowledge,
        Some(
            "RELEVANT KNOWLEDGE (from knowledge base):\n[Dana (person)]: {\"city\":\"Lyon\"}; works_at Acme\n\n[Acme (organization)]: works_at Dana"
        ),
        "{sent:?}"
    );

    let output = "query($id: ID!) { task(id: $id) { steps { output } } }";
    let as_admin = gql(&app, &token, output, json!({"id": id})).await;
    let shown = &as_admin.data()["task"]["steps"][0]["output"];
    assert_eq!(shown["content"], "ok");
    assert!(
        shown["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("You are an AI assistant"),
        "the prompt as sent: {shown}"
    );
    let member = app.token(Some("acme"), &[Role::Member]);
    let as_member = gql(&app, &member, output, json!({"id": id})).await;
    let hidden = &as_member.data()["task"]["steps"][0]["output"];
    assert_eq!(hidden["content"], shown["content"]);
    assert!(hidden.get("messages").is_none());
}
