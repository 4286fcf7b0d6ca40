//! A small MCP server over streamable HTTP for the tests: JSON-RPC in each POST, answered with
//! `application/json` (initialize, tools/list) or as one SSE event (tools/call), as real
//! servers do both; notifications get 202, a GET for a server stream gets 405. It records every
//! request's headers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::{Value, json};

/// One request as the server saw it: method, lower-case header names and values, body.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct McpHttpServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl McpHttpServer {
    pub fn start() -> McpHttpServer {
        McpHttpServer::start_with(None)
    }

    /// A server that answers 401 (`WWW-Authenticate: Bearer`) to a request without
    /// `Authorization: Bearer TOKEN`, as a hosted MCP server does.
    pub fn requiring_token(token: &str) -> McpHttpServer {
        McpHttpServer::start_with(Some(format!("Bearer {token}")))
    }

    fn start_with(authorization: Option<String>) -> McpHttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::clone(&seen);
        let authorization = Arc::new(authorization);
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let seen = Arc::clone(&shared);
                let authorization = Arc::clone(&authorization);
                thread::spawn(move || serve(stream, &seen, authorization.as_deref()));
            }
        });
        McpHttpServer { addr, seen }
    }

    /// The endpoint: `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>, authorization: Option<&str>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let method = line
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let length: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body = String::from_utf8_lossy(&body).into_owned();
        seen.lock().unwrap_or_else(|e| e.into_inner()).push(Seen {
            method: method.clone(),
            headers: headers.clone(),
            body: body.clone(),
        });
        let authorised = authorization.is_none_or(|want| {
            headers
                .iter()
                .any(|(k, v)| k == "authorization" && v == want)
        });
        let reply = if authorised {
            answer(&method, &body)
        } else {
            response(
                "401 Unauthorized",
                "WWW-Authenticate: Bearer realm=\"mcp\"\r\nContent-Type: application/json\r\n",
                r#"{"error":"invalid_token"}"#,
            )
        };
        if stream.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn response(status: &str, headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn answer(method: &str, body: &str) -> String {
    match method {
        "GET" => return response("405 Method Not Allowed", "", ""),
        "DELETE" => return response("200 OK", "", ""),
        _ => {}
    }
    let Ok(request) = serde_json::from_str::<Value>(body) else {
        return response("400 Bad Request", "", "");
    };
    let Some(id) = request.get("id").cloned() else {
        return response("202 Accepted", "", "");
    };
    let params = request.get("params").cloned().unwrap_or(Value::Null);
    let result = match request["method"].as_str().unwrap_or_default() {
        "initialize" => json!({
            "protocolVersion": params["protocolVersion"].as_str().unwrap_or("2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "nop-test-http", "version": "1.0.0"},
        }),
        "tools/list" => json!({"tools": [{"name": "echo", "description": "Echo the text back",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]}),
        "tools/call" => {
            let message = json!({"jsonrpc": "2.0", "id": id, "result": {
                "content": [{"type": "text", "text": format!("remote: {}", params["arguments"]["text"].as_str().unwrap_or_default())}],
                "isError": false}});
            let event = format!("event: message\ndata: {message}\n\n");
            return response(
                "200 OK",
                "Content-Type: text/event-stream\r\nMcp-Session-Id: s-1\r\n",
                &event,
            );
        }
        "ping" => json!({}),
        other => {
            let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("method not found: {other}")}});
            return response(
                "200 OK",
                "Content-Type: application/json\r\nMcp-Session-Id: s-1\r\n",
                &error.to_string(),
            );
        }
    };
    let message = json!({"jsonrpc": "2.0", "id": id, "result": result});
    response(
        "200 OK",
        "Content-Type: application/json\r\nMcp-Session-Id: s-1\r\n",
        &message.to_string(),
    )
}
