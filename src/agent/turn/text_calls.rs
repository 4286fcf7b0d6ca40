//! Tool calls a model wrote as text: small local models often answer with a ```json block, a
//! bare `{"name": …, "arguments": …}`, `<tool_call>`/`<tools>` tags or doubled braces where the
//! server expected its tool-call format, and the server passes that on as plain content.
//!
//! The rule, conservative on purpose: the reply is taken as calls only when it begins with call
//! blocks (whitespace between them), perhaps with prose after them (then only calls that can
//! run count: anything wrong makes it an answer): fenced blocks (no language, `json` or
//! `tool_call`), `<tool_call>`, `<tool_calls>`, `<tools>` or `<function_call>` tags (the closing
//! tag may be missing at the very end), Mistral's `[TOOL_CALLS]` or Llama's `<|python_tag|>`
//! before them, or bare JSON (an object, several, or an array, braces
//! perhaps doubled). Each block holds objects in a call's shape: a name (`name`, `tool`,
//! `tool_name`, or `function` as a string), arguments (`arguments`, `parameters`, `args` or
//! `input`, an object or a JSON string), perhaps `id` and `type`, and no other key; or
//! `{"function": {…}}` and `{"tool_calls": […]}` around such objects. Any prose, even one
//! line before a fence or bare JSON, makes the reply an answer: JSON quoted in an explanation is
//! not a call. Call tags after prose are calls when they can run (as vLLM's Hermes parser
//! takes them).
//! A single object that is one tool's arguments alone (its keys that tool's parameters, every
//! one it requires there, and no other tool taking them) is that tool's call.
//! A call whose tool is not offered or whose arguments do not fit its schema (required
//! properties present, types right) makes the reply a failed call, which the model is told of.

use serde_json::{Map, Value};

use crate::protocol::ToolCall;
use crate::providers::{ToolSpec, WireNames};

/// What a reply without tool calls holds.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum TextCalls {
    /// The reply is these calls, each of an offered tool with arguments that fit its schema.
    Calls(Vec<ToolCall>),
    /// The reply is in a call's shape but cannot be run: what is wrong, for the model.
    Failed(String),
    /// An answer.
    Answer,
}

/// The calls written as text in `text`, checked against the tools on offer.
pub(super) fn recover(text: &str, specs: &[ToolSpec]) -> TextCalls {
    let Some((blocks, trailing_prose)) = blocks(text) else {
        return tagged_after_prose(text, specs);
    };
    match of_blocks(blocks, specs) {
        // Prose after the calls (a line on what they will do): calls when they can run, else
        // an answer, never a correction.
        TextCalls::Failed(_) if trailing_prose => TextCalls::Answer,
        taken => taken,
    }
}

/// The calls in call tags after a lead-in (`I will count them:\n<tool_call>…</tool_call>`),
/// as vLLM's Hermes parser takes them: the first run of blocks from the first tag, when every
/// call there can run; else an answer. A fence or bare JSON after prose stays an answer.
fn tagged_after_prose(text: &str, specs: &[ToolSpec]) -> TextCalls {
    let first_tag = TAGS
        .iter()
        .filter_map(|tag| text.find(&format!("<{tag}>")))
        .min();
    let Some((blocks, _)) = first_tag.and_then(|at| blocks(&text[at..])) else {
        return TextCalls::Answer;
    };
    match of_blocks(blocks, specs) {
        TextCalls::Calls(calls) => TextCalls::Calls(calls),
        _ => TextCalls::Answer,
    }
}

/// The calls `blocks` hold, checked against the tools on offer.
fn of_blocks(blocks: Vec<Block<'_>>, specs: &[ToolSpec]) -> TextCalls {
    if let [block] = blocks.as_slice()
        && let Some(call) = arguments_alone(block.body, specs)
    {
        return TextCalls::Calls(vec![call]);
    }
    let mut written = Vec::new();
    for block in blocks {
        match block_calls(block.body) {
            Ok(calls) if !calls.is_empty() => written.extend(calls),
            Err(why) if why.looks_like_a_call => {
                return TextCalls::Failed(why.message);
            }
            _ if block.tagged => {
                return TextCalls::Failed(format!(
                    "the text inside <{}> is not a JSON object {{\"name\": …, \"arguments\": {{…}}}}",
                    block.tag
                ));
            }
            _ => return TextCalls::Answer,
        }
    }
    let wire = WireNames::new(specs);
    let mut calls = Vec::new();
    for call in written {
        let Some(spec) = offered(&call.name, specs, &wire) else {
            // A bare name with no arguments may be any JSON with a `name`: not a call.
            if !call.had_arguments {
                return TextCalls::Answer;
            }
            let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            return TextCalls::Failed(format!(
                "there is no tool named `{}`; the tools are: {}",
                call.name,
                names.join(", ")
            ));
        };
        let arguments = match call.arguments {
            Ok(arguments) => arguments,
            Err(why) => {
                return TextCalls::Failed(format!("the arguments of `{}` {why}", call.name));
            }
        };
        if let Err(why) = fits(&arguments, &spec.parameters) {
            return TextCalls::Failed(format!(
                "the arguments of `{}` do not fit its parameters: {why}",
                call.name
            ));
        }
        calls.push(ToolCall {
            id: text_call_id(),
            name: spec.name.clone(),
            arguments,
            extra: Map::new(),
        });
    }
    TextCalls::Calls(calls)
}

/// The call `body` stands for when it is a tool's arguments alone, without its name (seen:
/// `{"tasks": […]}` for update-plan): one JSON object, not in a call's shape, whose keys are
/// all parameters of exactly one offered tool, with every parameter that tool requires (it
/// requires one at least), fitting its schema.
fn arguments_alone(body: &str, specs: &[ToolSpec]) -> Option<ToolCall> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    let Value::Object(object) = &value else {
        return None;
    };
    if object.is_empty() || calls_in(&value, &mut Vec::new()) {
        return None;
    }
    let takes = |spec: &ToolSpec| {
        let schema = &spec.parameters;
        let properties = schema.get("properties").and_then(Value::as_object)?;
        let required = schema.get("required").and_then(Value::as_array)?;
        let all_known = object.keys().all(|k| properties.contains_key(k));
        (all_known && !required.is_empty() && fits(&value, schema).is_ok()).then_some(())
    };
    let mut taking = specs.iter().filter(|spec| takes(spec).is_some());
    let (Some(spec), None) = (taking.next(), taking.next()) else {
        return None;
    };
    Some(ToolCall {
        id: text_call_id(),
        name: spec.name.clone(),
        arguments: value,
        extra: Map::new(),
    })
}

/// The offered tool `name` names: by its name, by the name the request gave it (an MCP tool's
/// `server__tool`), or with `_` for `-` (`read_file`), when that is one tool.
fn offered<'s>(name: &str, specs: &'s [ToolSpec], wire: &WireNames) -> Option<&'s ToolSpec> {
    let local = wire.local(name);
    if let Some(spec) = specs.iter().find(|s| s.name == name || s.name == local) {
        return Some(spec);
    }
    let loose = |n: &str| n.replace('_', "-");
    let mut alike = specs.iter().filter(|s| loose(&s.name) == loose(name));
    match (alike.next(), alike.next()) {
        (Some(spec), None) => Some(spec),
        _ => None,
    }
}

/// A new call's id: nine letters and digits (what vLLM's Mistral template insists on), random.
fn text_call_id() -> String {
    let uuid = uuid::Uuid::now_v7().simple().to_string();
    format!("t{}", &uuid[uuid.len() - 8..])
}

/// One block of a reply: its text, and whether tags made it (what they hold is meant as a call).
struct Block<'a> {
    body: &'a str,
    tagged: bool,
    tag: &'a str,
}

const TAGS: &[&str] = &["tool_call", "tool_calls", "tools", "function_call"];
const MARKERS: &[&str] = &["[TOOL_CALLS]", "<|python_tag|>"];
const FENCE_LANGUAGES: &[&str] = &["", "json", "tool_call"];

/// The blocks `text` begins with, and whether prose follows them; `None` when it begins with
/// anything else (prose).
fn blocks(text: &str) -> Option<(Vec<Block<'_>>, bool)> {
    let mut rest = text.trim();
    let mut found = Vec::new();
    while !rest.is_empty() {
        // The markers some chat templates put before calls (Mistral, Llama 3) stand for nothing.
        if let Some(after) = MARKERS.iter().find_map(|m| rest.strip_prefix(m)) {
            rest = after.trim_start();
            continue;
        }
        // A fence left over around or after tags (```` <tools>…</tools> ``` ````) stands for
        // nothing either.
        if rest.bytes().all(|b| b == b'`') {
            break;
        }
        if let Some(after) = rest.strip_prefix("```") {
            let (language, body) = after.split_once('\n')?;
            if !FENCE_LANGUAGES.contains(&language.trim().to_ascii_lowercase().as_str()) {
                // Code after the calls is prose after them; before any, an answer.
                return (!found.is_empty()).then_some((found, true));
            }
            if starts_with_tag(body.trim_start()).is_some() {
                rest = body.trim_start();
                continue;
            }
            let (inside, after) = body.split_once("```")?;
            found.push(Block {
                body: inside,
                tagged: false,
                tag: "",
            });
            rest = after.trim_start();
        } else if let Some(tag) = starts_with_tag(rest) {
            let body = &rest[tag.len() + 2..];
            let close = format!("</{tag}>");
            let (inside, after) = body.split_once(&close).unwrap_or((body, ""));
            found.push(Block {
                body: unfenced(inside),
                tagged: true,
                tag,
            });
            rest = after.trim_start();
        } else if rest.starts_with('{') || rest.starts_with('[') {
            // Bare JSON: the rest of the reply, whole.
            found.push(Block {
                body: rest,
                tagged: false,
                tag: "",
            });
            break;
        } else if found.is_empty() {
            return None;
        } else {
            return Some((found, true));
        }
    }
    (!found.is_empty()).then_some((found, false))
}

/// The call tag `text` opens with, if any.
fn starts_with_tag(text: &str) -> Option<&'static str> {
    TAGS.iter().copied().find(|t| {
        text.strip_prefix('<')
            .and_then(|r| r.strip_prefix(*t))
            .is_some_and(|r| r.starts_with('>'))
    })
}

/// A tag's text without a fence around it or after it (some models fence the JSON inside the
/// tags, or leave a closing fence where the closing tag should be).
fn unfenced(inside: &str) -> &str {
    let inside = inside.trim();
    if let Some((_, body)) = inside.strip_prefix("```").and_then(|r| r.split_once('\n')) {
        return body.trim_end().strip_suffix("```").unwrap_or(body);
    }
    inside.strip_suffix("```").unwrap_or(inside).trim_end()
}

/// A call as written: its name and its arguments (or what is wrong with them).
struct Written {
    name: String,
    arguments: Result<Value, String>,
    /// Whether an arguments key was there.
    had_arguments: bool,
}

/// Why a block is not calls: the message for the model, and whether the block still looks like
/// a call (JSON that does not parse but names a tool and its arguments).
struct NotCalls {
    message: String,
    looks_like_a_call: bool,
}

/// The calls of one block: one or more JSON values (perhaps with doubled braces), each a call
/// or a list of calls.
fn block_calls(body: &str) -> Result<Vec<Written>, NotCalls> {
    let body = body.trim();
    let values = json_values(body)
        .or_else(|first| {
            undoubled(body)
                .and_then(|b| json_values(&b).ok())
                .or_else(|| rebalanced(body).and_then(|b| json_values(&b).ok()))
                .ok_or(first)
        })
        .map_err(|e| NotCalls {
            looks_like_a_call: body.contains("\"name\"")
                && ["\"arguments\"", "\"parameters\""]
                    .iter()
                    .any(|k| body.contains(k)),
            message: format!("the call is not valid JSON ({e})"),
        })?;
    let mut calls = Vec::new();
    for value in &values {
        if !calls_in(value, &mut calls) {
            return Ok(Vec::new());
        }
    }
    Ok(calls)
}

/// Every JSON value of `text`, one after another with only whitespace between.
fn json_values(text: &str) -> Result<Vec<Value>, serde_json::Error> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .collect()
}

/// `text` with its brackets balanced, when they are not (outside strings): a closing brace or
/// bracket that closes nothing dropped, those left open closed at the end. Seen from small
/// models: one `}` too many after a call, or one too few at its end.
fn rebalanced(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len() + 4);
    let mut open = Vec::new();
    let (mut in_string, mut escaped, mut changed) = (false, false, false);
    for c in text.chars() {
        if in_string {
            (escaped, in_string) = match c {
                _ if escaped => (false, true),
                '\\' => (true, true),
                '"' => (false, false),
                _ => (false, true),
            };
        } else {
            match c {
                '"' => in_string = true,
                '{' => open.push('}'),
                '[' => open.push(']'),
                '}' | ']' if open.last() == Some(&c) => {
                    open.pop();
                }
                '}' | ']' => {
                    changed = true;
                    continue;
                }
                _ => {}
            }
        }
        out.push(c);
    }
    if in_string {
        return None;
    }
    changed |= !open.is_empty();
    out.extend(open.iter().rev());
    changed.then_some(out)
}

/// `{{ … }}` as one brace each: the outer pair alone when the inside then parses, else every
/// doubled brace.
fn undoubled(text: &str) -> Option<String> {
    let inner = text.strip_prefix("{{")?.strip_suffix("}}")?;
    let outer = format!("{{{inner}}}");
    if serde_json::from_str::<Value>(&outer).is_ok() {
        return Some(outer);
    }
    Some(text.replace("{{", "{").replace("}}", "}"))
}

const NAME_KEYS: &[&str] = &["name", "tool", "tool_name", "function"];
const ARGUMENT_KEYS: &[&str] = &["arguments", "parameters", "args", "input"];

/// Adds the calls of `value` to `calls`; false when it is not in a call's shape.
fn calls_in(value: &Value, calls: &mut Vec<Written>) -> bool {
    match value {
        Value::Array(items) => !items.is_empty() && items.iter().all(|v| calls_in(v, calls)),
        Value::Object(object) => {
            if let Some(Value::Array(list)) = object.get("tool_calls") {
                return object.len() == 1 && calls_in(&Value::Array(list.clone()), calls);
            }
            if let Some(inner @ Value::Object(_)) = object.get("function") {
                return object
                    .keys()
                    .all(|k| ["function", "id", "type"].contains(&k.as_str()))
                    && calls_in(inner, calls);
            }
            match one_call(object) {
                Some(call) => {
                    calls.push(call);
                    true
                }
                None => false,
            }
        }
        _ => false,
    }
}

/// The call `object` is, when it has a name, perhaps arguments, and nothing else.
fn one_call(object: &Map<String, Value>) -> Option<Written> {
    let known = |k: &String| {
        NAME_KEYS.contains(&k.as_str())
            || ARGUMENT_KEYS.contains(&k.as_str())
            || k == "id"
            || k == "type"
    };
    if !object.keys().all(known) {
        return None;
    }
    let names: Vec<&Value> = NAME_KEYS.iter().filter_map(|k| object.get(*k)).collect();
    let [Value::String(name)] = names.as_slice() else {
        return None;
    };
    let given: Vec<&Value> = ARGUMENT_KEYS
        .iter()
        .filter_map(|k| object.get(*k))
        .collect();
    let arguments = match given.as_slice() {
        [] | [Value::Null] => Ok(Value::Object(Map::new())),
        [Value::String(raw)] => serde_json::from_str::<Value>(raw)
            .map_err(|e| format!("are a string that is not JSON ({e})")),
        [value] => Ok((*value).clone()),
        _ => return None,
    };
    Some(Written {
        name: name.clone(),
        arguments,
        had_arguments: !given.is_empty(),
    })
}

/// Whether `arguments` fit the JSON schema `schema` as far as a model's mistakes go: an object,
/// its required properties present, no property the schema closes out, each known property of
/// its declared type.
fn fits(arguments: &Value, schema: &Value) -> Result<(), String> {
    let Value::Object(given) = arguments else {
        return Err("they must be a JSON object".to_string());
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    let required = schema.get("required").and_then(Value::as_array);
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        if given.get(name).is_none_or(Value::is_null) {
            return Err(format!("`{name}` is required"));
        }
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (name, value) in given {
        match properties.and_then(|p| p.get(name)) {
            Some(property) => {
                if let Some(expected) = declared_types(property)
                    && !expected.iter().any(|t| is_of_type(value, t))
                {
                    return Err(format!("`{name}` must be {}", expected.join(" or ")));
                }
            }
            None if closed => {
                let known: Vec<&str> = properties
                    .map(|p| p.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                return Err(format!(
                    "there is no parameter `{name}` (the parameters are: {})",
                    known.join(", ")
                ));
            }
            None => {}
        }
    }
    Ok(())
}

/// The types a property's schema declares (`"type": "string"` or a list), `None` when it
/// declares none (a reference, `anyOf`): anything goes then.
fn declared_types(property: &Value) -> Option<Vec<&str>> {
    match property.get("type")? {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(list) => Some(list.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

fn is_of_type(value: &Value, expected: &str) -> bool {
    match expected {
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn specs() -> Vec<ToolSpec> {
        crate::tools::Registry::builtin().specs()
    }

    fn calls(text: &str) -> Vec<(String, Value)> {
        match recover(text, &specs()) {
            TextCalls::Calls(calls) => calls.into_iter().map(|c| (c.name, c.arguments)).collect(),
            other => panic!("{text}: {other:?}"),
        }
    }

    fn failed(text: &str) -> String {
        match recover(text, &specs()) {
            TextCalls::Failed(why) => why,
            other => panic!("{text}: {other:?}"),
        }
    }

    fn shell(command: &str) -> Vec<(String, Value)> {
        vec![("shell".to_string(), json!({"command": command}))]
    }

    #[test]
    fn every_shape_small_models_write_is_a_call() {
        for text in [
            "```json\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}\n```",
            "```\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}\n```\n",
            "  {\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}  ",
            "{\"name\": \"shell\", \"parameters\": {\"command\": \"echo hi\"}}",
            "{\"tool\": \"shell\", \"args\": {\"command\": \"echo hi\"}}",
            "{\"type\": \"function\", \"function\": {\"name\": \"shell\", \"arguments\": \"{\\\"command\\\": \\\"echo hi\\\"}\"}}",
            "<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}",
            "<tools>\n```json\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}\n```\n</tools>",
            "{{\"name\": \"shell\", \"arguments\": {{\"command\": \"echo hi\"}}}}",
            "{{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}}",
            "{\"tool_calls\": [{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}]}",
            "[TOOL_CALLS] [{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}]",
            "<|python_tag|>{\"name\": \"shell\", \"parameters\": {\"command\": \"echo hi\"}}",
            // Seen from Qwen2.5-Coder-1.5B: a brace too many or too few.
            "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}}}\n</tools>",
            "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}\n</tools>",
            // A fence closed after the tags, or opened around them.
            "<tools>\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}\n</tools>\n```",
            "```json\n<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}\n</tool_call>\n```",
            "<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}\n```",
        ] {
            assert_eq!(calls(text), shell("echo hi"), "{text}");
        }
    }

    #[test]
    fn a_tools_arguments_alone_are_its_call_when_only_it_takes_them() {
        for text in [
            "```\n{\"command\": \"echo hi\"}\n```",
            "{\"command\": \"echo hi\", \"timeout_s\": 5}",
        ] {
            let got = calls(text);
            assert_eq!(got.len(), 1, "{text}");
            assert_eq!(got[0].0, "shell", "{text}");
        }
        for text in [
            "{\"command\": \"echo hi\", \"colour\": \"red\"}",
            "{\"command\": 3}",
            "{\"timeout_s\": 5}",
            "{}",
        ] {
            assert_eq!(recover(text, &specs()), TextCalls::Answer, "{text}");
        }
    }

    #[test]
    fn prose_after_calls_leaves_them_calls_when_they_can_run() {
        // Seen from Qwen2.5-Coder-1.5B: the call, then a line on what it will show.
        let text = "```json\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}\n```\nThe output will tell you whether the test passed.";
        assert_eq!(calls(text), shell("echo hi"));
        let then_code = "<tool_call>{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}</tool_call>\n```python\nprint(1)\n```";
        assert_eq!(calls(then_code), shell("echo hi"));
        // A call that cannot run, followed by prose, is an answer: not corrected.
        for text in [
            "```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n```\nThat lists the files.",
            "```json\n{\"name\": \"my-package\", \"version\": \"1.0.0\"}\n```\nThis is package.json.",
        ] {
            assert_eq!(recover(text, &specs()), TextCalls::Answer, "{text}");
        }
    }

    #[test]
    fn calls_in_tags_after_a_lead_in_run_when_they_can() {
        let text = "I will run it:\n<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo hi\"}}\n</tool_call>\nThen I check.";
        assert_eq!(calls(text), shell("echo hi"));
        for text in [
            "I will run it:\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>",
            "The tag <tool_call> is how Qwen marks a call.",
        ] {
            assert_eq!(recover(text, &specs()), TextCalls::Answer, "{text}");
        }
    }

    #[test]
    fn several_blocks_are_several_calls() {
        let text = "<tool_call>{\"name\": \"shell\", \"arguments\": {\"command\": \"a\"}}</tool_call>\n<tool_call>{\"name\": \"read-file\", \"arguments\": {\"path\": \"b\"}}</tool_call>";
        let got = calls(text);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], shell("a")[0]);
        assert_eq!(got[1], ("read-file".to_string(), json!({"path": "b"})));
        let fenced = "```json\n{\"name\": \"shell\", \"arguments\": {\"command\": \"a\"}}\n```\n\n```json\n{\"name\": \"shell\", \"arguments\": {\"command\": \"b\"}}\n```";
        assert_eq!(calls(fenced).len(), 2);
        let list = "[{\"name\": \"shell\", \"arguments\": {\"command\": \"a\"}}, {\"name\": \"shell\", \"arguments\": {\"command\": \"b\"}}]";
        assert_eq!(calls(list).len(), 2);
        let lines = "{\"name\": \"shell\", \"arguments\": {\"command\": \"a\"}}\n{\"name\": \"shell\", \"arguments\": {\"command\": \"b\"}}";
        assert_eq!(calls(lines).len(), 2);
    }

    #[test]
    fn json_in_prose_or_not_in_a_calls_shape_is_an_answer() {
        for text in [
            "You could call {\"name\": \"shell\", \"arguments\": {\"command\": \"ls\"}} to list them.",
            "Run this:\n```json\n{\"name\": \"shell\", \"arguments\": {\"command\": \"ls\"}}\n```",
            "```json\n{\"name\": \"my-package\", \"version\": \"1.0.0\"}\n```",
            "```rust\nfn main() {}\n```",
            "{\"name\": \"Alice\"}",
            "[1, 2, 3]",
            "The answer is 42.",
            "",
        ] {
            assert_eq!(recover(text, &specs()), TextCalls::Answer, "{text}");
        }
    }

    #[test]
    fn a_call_that_cannot_run_says_what_is_wrong() {
        let unknown = failed("{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}");
        assert!(unknown.contains("no tool named `bash`"), "{unknown}");
        assert!(unknown.contains("shell, read-file"), "{unknown}");
        let missing =
            failed("```json\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"}}\n```");
        assert!(missing.contains("`command` is required"), "{missing}");
        let typed = failed("{\"name\": \"shell\", \"arguments\": {\"command\": [\"ls\"]}}");
        assert!(typed.contains("`command` must be string"), "{typed}");
        let not_json =
            failed("```json\n{\"name\": \"shell\", \"arguments\": {\"command\": ls}}\n```");
        assert!(not_json.contains("not valid JSON"), "{not_json}");
        let tagged = failed("<tool_call>shell ls</tool_call>");
        assert!(tagged.contains("inside <tool_call>"), "{tagged}");
        // One bad call among good ones: nothing runs, the model is told.
        let mixed = failed(
            "<tool_call>{\"name\": \"shell\", \"arguments\": {\"command\": \"a\"}}</tool_call><tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>",
        );
        assert!(mixed.contains("`nope`"), "{mixed}");
    }

    #[test]
    fn a_tool_is_named_by_its_name_its_wire_name_or_with_underscores() {
        assert_eq!(
            calls("{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}"),
            vec![("read-file".to_string(), json!({"path": "a"}))]
        );
        let mut specs = specs();
        specs.push(ToolSpec {
            name: "github.files.count".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {}}),
        });
        let TextCalls::Calls(got) = recover(
            "{\"name\": \"github__files__count\", \"arguments\": {}}",
            &specs,
        ) else {
            panic!("not a call")
        };
        assert_eq!(got[0].name, "github.files.count");
    }

    #[test]
    fn a_tool_that_is_not_offered_is_not_run() {
        let only_read: Vec<ToolSpec> = specs()
            .into_iter()
            .filter(|s| s.name == "read-file")
            .collect();
        assert!(matches!(
            recover(
                "{\"name\": \"shell\", \"arguments\": {\"command\": \"ls\"}}",
                &only_read
            ),
            TextCalls::Failed(_)
        ));
    }

    #[test]
    fn schema_types_and_closed_objects_are_checked() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "limit": {"type": ["integer", "null"]},
                "any": {"$ref": "#/x"}
            },
            "required": ["path"],
            "additionalProperties": false
        });
        assert_eq!(
            fits(&json!({"path": "a", "limit": 3, "any": [1]}), &schema),
            Ok(())
        );
        assert_eq!(fits(&json!({"path": "a", "limit": null}), &schema), Ok(()));
        assert!(fits(&json!({"path": "a", "limit": 1.5}), &schema).is_err());
        assert!(fits(&json!({"limit": 1}), &schema).is_err());
        assert!(
            fits(&json!({"path": "a", "other": 1}), &schema)
                .unwrap_err()
                .contains("no parameter `other`")
        );
        assert!(fits(&json!("a"), &schema).is_err());
    }
}
