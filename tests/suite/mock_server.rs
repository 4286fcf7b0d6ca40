//! The mock model server itself: it answers real HTTP clients with the scripted bytes, records
//! what they sent, and its builders produce streams that reassemble into what was scripted.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use futures_util::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::mock::{
    MockResponse, MockServer, NO_RESPONSE_LEFT, anthropic, openai, split_pieces,
};

const WAIT: Duration = Duration::from_secs(10);

fn client() -> reqwest::Client {
    // reqwest is built with rustls-no-provider; it wants a process-wide provider even for http.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// The `data:` payloads of an SSE body, in order.
fn data_lines(body: &str) -> Vec<&str> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect()
}

fn sse_body(response: &MockResponse) -> String {
    match response {
        MockResponse::Sse { chunks, .. } => chunks.concat(),
        other => panic!("not an SSE response: {other:?}"),
    }
}

#[tokio::test]
async fn sse_reply_arrives_byte_for_byte_and_the_request_is_recorded() {
    let reply = openai::reply_text("Hello from the mock");
    let expected = sse_body(&reply);
    let server = MockServer::start(vec![reply]);
    let request = json!({ "model": "mock", "stream": true, "messages": [{ "role": "user", "content": "hi" }] });

    let response = client()
        .post(format!("{}/chat/completions", server.openai_base_url()))
        .header("authorization", "Bearer test-key")
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    assert_eq!(response.text().await.unwrap(), expected);

    let recorded = server.wait_for_requests(1, WAIT);
    assert_eq!(recorded.len(), 1);
    let recorded = &recorded[0];
    assert_eq!(recorded.method, "POST");
    assert_eq!(recorded.path, "/v1/chat/completions");
    assert_eq!(recorded.body, request);
    assert_eq!(recorded.header("Authorization"), Some("Bearer test-key"));
    assert_eq!(recorded.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn status_429_carries_retry_after_then_the_script_moves_on() {
    let server = MockServer::start(vec![MockResponse::Status {
        code: 429,
        headers: vec![("retry-after".into(), "7".into())],
        body: r#"{"error":{"type":"rate_limit_error","message":"slow down"}}"#.into(),
    }]);
    server.push(anthropic::reply_text("ok"));
    let client = client();
    let url = format!("{}/v1/messages", server.anthropic_base_url());

    let first = client.post(&url).json(&json!({})).send().await.unwrap();
    assert_eq!(first.status(), 429);
    assert_eq!(first.headers()["retry-after"], "7");
    assert_eq!(first.headers()["content-type"], "application/json");
    let error: Value = first.json().await.unwrap();
    assert_eq!(error["error"]["type"], "rate_limit_error");

    let second = client.post(&url).json(&json!({})).send().await.unwrap();
    assert_eq!(second.status(), 200);
    assert!(
        second
            .text()
            .await
            .unwrap()
            .ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn an_empty_script_answers_500_and_still_records_the_request() {
    let server = MockServer::start(Vec::new());
    let response = client()
        .post(format!("{}/chat/completions", server.openai_base_url()))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 500);
    assert_eq!(response.text().await.unwrap(), NO_RESPONSE_LEFT);
    let recorded = server.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].body, Value::Null);
    assert_eq!(recorded[0].raw_body, "not json");
}

#[tokio::test]
async fn delayed_sse_chunks_stream_in_without_losing_bytes() {
    let chunks = vec![openai::text("a"), openai::text("b"), openai::done()];
    let expected = chunks.concat();
    let server = MockServer::start(vec![MockResponse::Sse {
        chunks,
        delay: Duration::from_millis(20),
    }]);
    let response = client()
        .post(format!("{}/chat/completions", server.openai_base_url()))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let mut stream = response.bytes_stream();
    let mut received = Vec::new();
    let mut reads = 0;
    while let Some(bytes) = stream.next().await {
        received.extend_from_slice(&bytes.unwrap());
        reads += 1;
    }
    // How reads split depends on scheduling; only the bytes are guaranteed.
    assert!(reads >= 1);
    assert_eq!(received.len(), expected.len());
    assert_eq!(String::from_utf8(received).unwrap(), expected);
}

#[tokio::test]
async fn a_stall_sends_its_chunks_then_nothing() {
    let first = anthropic::message_start(3);
    let server = MockServer::start(vec![MockResponse::Stall {
        chunks: vec![first.clone()],
        hold: Duration::from_secs(30),
    }]);
    let response = client()
        .post(format!("{}/v1/messages", server.anthropic_base_url()))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let mut stream = response.bytes_stream();
    let mut received = Vec::new();
    while received.len() < first.len() {
        received.extend_from_slice(&stream.next().await.unwrap().unwrap());
    }
    assert_eq!(String::from_utf8(received).unwrap(), first);
    // The hold is far longer than this, so nothing (not even the end) can arrive meanwhile.
    let more = tokio::time::timeout(Duration::from_millis(100), stream.next()).await;
    assert!(more.is_err(), "stalled stream produced {more:?}");
    // Dropping the stream hangs up; the server notices and ends the hold early.
}

#[test]
fn raw_http_chunked_request_is_parsed_and_status_has_content_length() {
    let server = MockServer::start(vec![MockResponse::status(400, "bad")]);
    let mut socket = TcpStream::connect(server.url().trim_start_matches("http://")).unwrap();
    socket
        .write_all(
            b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\n\
              Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n\
              5\r\n{\"a\":\r\n3\r\n 1}\r\n0\r\n\r\n",
        )
        .unwrap();
    let mut answer = String::new();
    socket.read_to_string(&mut answer).unwrap(); // ends because the server closes
    assert_eq!(
        answer,
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: 3\r\nconnection: close\r\n\r\nbad"
    );
    let recorded = server.wait_for_requests(1, WAIT);
    assert_eq!(recorded[0].path, "/v1/messages?beta=true");
    assert_eq!(recorded[0].header("x-api-key"), Some("k"));
    assert_eq!(recorded[0].body, json!({ "a": 1 }));
}

#[test]
fn split_pieces_respects_char_boundaries() {
    assert_eq!(split_pieces("abcdefg", 3), vec!["abc", "de", "fg"]);
    assert_eq!(split_pieces("héé", 5), vec!["h", "é", "é"]);
    assert_eq!(split_pieces("xy", 0), vec!["xy"]);
    assert!(split_pieces("", 3).is_empty());
}

#[test]
fn openai_tool_call_streams_reassemble_into_the_arguments() {
    let args = json!({ "command": "ls -la", "path": "src/é" });
    let body = sse_body(&openai::reply_tool_calls(&[(
        "call_1",
        "shell",
        args.clone(),
    )]));
    let lines = data_lines(&body);
    assert_eq!(lines.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = lines[..lines.len() - 1]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut arguments = String::new();
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        for call in chunk["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            arguments.push_str(call["function"]["arguments"].as_str().unwrap());
        }
    }
    assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap(), args);
    assert_eq!(
        chunks[0]["choices"][0]["delta"]["tool_calls"][0]["id"],
        "call_1"
    );
    assert_eq!(
        chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"],
        "shell"
    );
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["total_tokens"], 15);

    // llama.cpp repeats id and name on every delta; the arguments still add up.
    let quirky = openai::tool_call_llama_cpp(0, "c", "read", r#"{"p":1}"#, 2);
    assert_eq!(quirky.len(), 3);
    for chunk in &quirky {
        let value: Value = serde_json::from_str(data_lines(chunk)[0]).unwrap();
        assert_eq!(value["choices"][0]["delta"]["tool_calls"][0]["id"], "c");
        assert_eq!(
            value["choices"][0]["delta"]["tool_calls"][0]["function"]["name"],
            "read"
        );
    }
}

#[test]
fn anthropic_streams_follow_the_event_shapes() {
    let args = json!({ "path": "README.md" });
    let body = sse_body(&anthropic::reply_tool_calls(&[(
        "toolu_1",
        "read",
        args.clone(),
    )]));
    let frames: Vec<(String, Value)> = body
        .split_terminator("\n\n")
        .map(|frame| {
            let (event, data) = frame.split_once('\n').unwrap();
            let event = event.strip_prefix("event: ").unwrap().to_string();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(data["type"], event.as_str(), "event name matches data.type");
            (event, data)
        })
        .collect();
    let events: Vec<&str> = frames.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        events,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    assert_eq!(
        frames[2].1["content_block"],
        json!({ "type": "tool_use", "id": "toolu_1", "name": "read", "input": {} })
    );
    let partial: String = frames[3..6]
        .iter()
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().unwrap()
        })
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), args);
    assert_eq!(frames[7].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(frames[7].1["usage"]["output_tokens"], 5);

    let text = anthropic::text_block(1, &["Hel", "lo"]);
    let delta: Value = serde_json::from_str(data_lines(&text[1])[0]).unwrap();
    assert_eq!(
        delta,
        json!({ "type": "content_block_delta", "index": 1, "delta": { "type": "text_delta", "text": "Hel" } })
    );
}
