//! Fleet agents answering as JSON (`--json-schema`, `--json-schema-prompt-only`) against the
//! fake server (`fake/`): the constrained run sends `response_format`, its prompt-only twin
//! does not, both send the same prompts; the report records which ran, counts JSON replies,
//! and `compare` / `table` label the runs.

mod fake;

use fake::{client, fleet_summary, start, Script, SERIAL};
use indicatif::ProgressBar;
use inferd_bench::calibrate::FIRST_QUESTION;
use inferd_bench::structured::{self, builtin_schema, instruction, REMINDER};
use inferd_bench::{
    compare_table, markdown_tables, run_fleet, BenchReport, Client, FleetConfig, StructuredUsed,
};
use serde_json::{json, Value};
use std::time::Duration;

fn script() -> Script {
    // TTFTs under ~40 ms would meet the fake server's Nagle + delayed-ACK stall.
    Script {
        ttft: Duration::from_millis(50),
        gap: Duration::from_millis(2),
        ..Default::default()
    }
}

fn cfg(schema: Option<&str>, prompt_only: bool) -> FleetConfig {
    FleetConfig {
        agents: 3,
        context_tokens: 200,
        turns: 2,
        reply_tokens: 8,
        seed: 7,
        structured: schema.map(String::from),
        prompt_only,
        schema: schema.map(|s| structured::load_schema(s).unwrap()),
        ..Default::default()
    }
}

/// Runs the fleet; its report (engine "inferd") and the generation bodies the server got.
async fn run(c: &Client, shared: &fake::Shared, cfg: &FleetConfig) -> (BenchReport, Vec<Value>) {
    let mut report = run_fleet(c, cfg, &ProgressBar::hidden()).await.unwrap();
    report.meta.insert("engine".into(), "inferd".into());
    let bodies = std::mem::take(&mut *shared.bodies.lock().unwrap());
    assert_eq!(bodies.len(), 6);
    (report, bodies)
}

/// Each request's messages with the assistant replies blanked (they are the server's), in a
/// stable order (agents' requests arrive interleaved).
fn prompts(bodies: &[Value]) -> Vec<Value> {
    let mut v: Vec<Value> = bodies
        .iter()
        .map(|b| {
            let mut m = b["messages"].clone();
            for x in m.as_array_mut().unwrap() {
                if x["role"] == "assistant" {
                    x["content"] = json!("(reply)");
                }
            }
            m
        })
        .collect();
    v.sort_by_key(|m| m.to_string());
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_runs_differ_only_in_the_constraint() {
    let _g = SERIAL.lock().await;
    let (url, shared) = start(script()).await;
    let c = client(&url).await;
    let schema = builtin_schema();

    let (free, free_bodies) = run(&c, &shared, &cfg(Some("builtin"), true)).await;
    let (held, held_bodies) = run(&c, &shared, &cfg(Some("builtin"), false)).await;
    let (plain, plain_bodies) = run(&c, &shared, &cfg(None, false)).await;
    println!("{}", held.table());

    // Only the constrained run sends response_format, the same on every request.
    let want = json!({"type": "json_schema", "json_schema": {"name": "agent_reply",
        "strict": true, "schema": schema}});
    for b in &held_bodies {
        assert_eq!(b["response_format"], want);
        assert_eq!(b["inferd"]["ignore_eos"], true);
    }
    assert!(free_bodies
        .iter()
        .chain(&plain_bodies)
        .all(|b| b.get("response_format").is_none()));
    // The schema in the request keeps the builtin's property order.
    let keys: Vec<&String> = held_bodies[0]["response_format"]["json_schema"]["schema"]
        ["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["thought", "action", "args", "confidence"]);

    // Identical prompts in both modes: turn 0's question ends with the schema, turn 1's
    // follow-up with the reminder; the schema is in the conversation once.
    assert_eq!(prompts(&free_bodies), prompts(&held_bodies));
    let asked = format!("{FIRST_QUESTION}\n{}", instruction(&schema));
    for b in &held_bodies {
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m[1]["content"], asked.as_str());
        let schema_text = schema.to_string();
        let n = m
            .iter()
            .filter(|x| x["content"].as_str().unwrap().contains(&schema_text))
            .count();
        assert_eq!(n, 1);
        if m.len() > 2 {
            assert_eq!(m.len(), 4);
            assert!(m[3]["content"]
                .as_str()
                .unwrap()
                .ends_with(&format!("\n{REMINDER}")));
        }
    }
    // Without a schema, the question alone.
    for b in &plain_bodies {
        assert_eq!(b["messages"][1]["content"], FIRST_QUESTION);
    }

    // Config, JSON counts, labels.
    let (fs, hs, ps) = (
        fleet_summary(&free),
        fleet_summary(&held),
        fleet_summary(&plain),
    );
    assert_eq!(
        (hs.json_replies, hs.json_valid),
        (Some(6), Some(6)),
        "the fake answers response_format with JSON"
    );
    assert_eq!((fs.json_replies, fs.json_valid), (Some(6), Some(0)));
    assert_eq!((ps.json_replies, ps.json_valid), (None, None));
    assert_eq!(
        held.structured(),
        Some((StructuredUsed::JsonSchema, "builtin"))
    );
    assert_eq!(
        free.structured(),
        Some((StructuredUsed::SchemaPrompt, "builtin"))
    );
    assert_eq!(plain.structured(), None);
    assert_eq!(held.engine_label(), "inferd +json-schema");
    assert_eq!(free.engine_label(), "inferd +schema-prompt");
    assert_eq!(plain.engine_label(), "inferd");
    let t = held.table();
    assert!(
        t.contains("structured replies  builtin: JSON Schema in the prompt and as response_format")
    );
    assert!(
        t.contains("JSON replies") && t.contains("6 of 6 replies parse as JSON"),
        "{t}"
    );
    assert!(free.table().contains("JSON Schema in the prompt only"));
    assert!(!plain.table().contains("JSON"));

    // The JSON report says which ran, and reads back equal.
    for (r, name, prompt_only) in [
        (&held, json!("builtin"), false),
        (&free, json!("builtin"), true),
        (&plain, Value::Null, false),
    ] {
        let v: Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
        let cfg = &v["workload"]["config"];
        assert_eq!(cfg["structured"], name);
        assert_eq!(cfg["prompt_only"], prompt_only);
        assert_eq!(cfg["schema"].is_null(), name.is_null());
        assert_eq!(BenchReport::from_json(&r.to_json().unwrap()).unwrap(), *r);
    }
    // A report written before these fields existed reads as a run without a schema.
    let mut v: Value = serde_json::from_str(&plain.to_json().unwrap()).unwrap();
    for k in ["structured", "prompt_only", "schema"] {
        v["workload"]["config"]
            .as_object_mut()
            .unwrap()
            .remove(k)
            .unwrap();
    }
    for k in ["json_replies", "json_valid"] {
        v["workload"]["summary"]
            .as_object_mut()
            .unwrap()
            .remove(k)
            .unwrap();
    }
    assert_eq!(BenchReport::from_json(&v.to_string()).unwrap(), plain);

    // compare: A the prompt-only twin, B the constrained run.
    let cmp = compare_table(&free, &held);
    println!("{cmp}");
    assert!(cmp.starts_with("A: inferd +schema-prompt (fleet"), "{cmp}");
    assert!(cmp.contains("B: inferd +json-schema (fleet"), "{cmp}");
    let row = cmp
        .lines()
        .find(|l| l.trim_start().starts_with("JSON valid %"))
        .expect("a JSON valid row");
    assert_eq!(
        row.split_whitespace().skip(3).collect::<Vec<_>>(),
        ["0.0", "100.0", "-"]
    );
    assert!(cmp.contains("gap p50 ms"));
    let row = cmp
        .lines()
        .find(|l| l.trim_start().starts_with("tokens/reply"))
        .expect("a tokens/reply row");
    assert_eq!(
        row.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["8.0", "8.0", "1.00x"]
    );
    assert!(!compare_table(&plain, &plain).contains("JSON valid"));

    // table with --baseline inferd: the constrained row is divided by its prompt-only twin,
    // not by the plain run (other prompts); rows without a twin get no ratio.
    let md = markdown_tables(&[held.clone(), plain.clone(), free.clone()], "inferd");
    println!("{md}");
    let cols: Vec<usize> = md.lines().map(|l| l.matches('|').count()).collect();
    assert!(cols.iter().all(|&c| c == cols[0]), "{md}");
    assert!(md.lines().next().unwrap().contains("| JSON valid |"));
    let line = |label: &str| {
        md.lines()
            .find(|l| l.contains(&format!("| {label} |")))
            .unwrap_or_else(|| panic!("no {label} row in\n{md}"))
            .to_string()
    };
    let held_row = line("inferd +json-schema");
    assert!(held_row.contains("| 6/6 |"), "{held_row}");
    assert!(!held_row.ends_with("| - | - |"), "{held_row}");
    assert!(line("inferd +schema-prompt").ends_with("| 0/6 | - | - |"));
    assert!(line("inferd").ends_with("| - | - | - |"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_needs_chat_prompts_and_its_schema() {
    let _g = SERIAL.lock().await;
    let (url, shared) = start(script()).await;
    let c = client(&url).await;
    let e = run_fleet(
        &c,
        &FleetConfig {
            token_prompts: true,
            ..cfg(Some("builtin"), false)
        },
        &ProgressBar::hidden(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("--json-schema needs chat prompts"), "{e}");
    let e = run_fleet(
        &c,
        &FleetConfig {
            schema: None,
            ..cfg(Some("builtin"), false)
        },
        &ProgressBar::hidden(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("needs both"), "{e}");
    assert!(shared.bodies.lock().unwrap().is_empty());
}
