//! What the model reads of an MCP result: every content type as text, nothing silently dropped.
//! The provider layer sends text only, so an image or audio is named with its type and size,
//! not shown (`docs/skills-hooks-plugins.md`).

use serde_json::Value;

/// At most this many resources are listed in a `read_resource` tool's description.
pub const LISTED_RESOURCES: usize = 20;

/// The blocks of a `tools/call` result (`content`, as JSON) as one text; a result with no
/// content gives its `structuredContent`.
pub fn render(blocks: &[Value], structured: Option<&Value>) -> String {
    if blocks.is_empty() {
        return structured.map(Value::to_string).unwrap_or_default();
    }
    blocks.iter().map(block).collect::<Vec<_>>().join("\n")
}

/// One content block.
pub fn block(block: &Value) -> String {
    let text = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or_default();
    match text("type") {
        "text" => text("text").to_string(),
        "image" => format!(
            "[image: {}, {} bytes]",
            text("mimeType"),
            decoded_len(text("data"))
        ),
        "audio" => format!(
            "[audio: {}, {} bytes]",
            text("mimeType"),
            decoded_len(text("data"))
        ),
        "resource" => resource(block.get("resource").unwrap_or(&Value::Null)),
        "resource_link" => {
            let mut line = format!("[link: {} {}", text("name"), text("uri"));
            if !text("mimeType").is_empty() {
                line.push_str(&format!(", {}", text("mimeType")));
            }
            if !text("description").is_empty() {
                line.push_str(&format!(": {}", text("description")));
            }
            line.push(']');
            line
        }
        other => format!(
            "[content of type `{other}`, which nop does not read: {} bytes of JSON]",
            block.to_string().len()
        ),
    }
}

/// The contents of a resource (embedded, or read with `resources/read`): a text resource's text
/// after a line naming it, a blob named with its size.
pub fn resource(contents: &Value) -> String {
    let text = |key: &str| contents.get(key).and_then(Value::as_str);
    let uri = text("uri").unwrap_or_default();
    let mime = text("mimeType").unwrap_or("unknown type");
    match (text("text"), text("blob")) {
        (Some(body), _) => format!("[resource: {uri}, {mime}]\n{body}"),
        (None, Some(blob)) => format!("[resource: {uri}, {mime}, {} bytes]", decoded_len(blob)),
        (None, None) => format!("[resource: {uri}, {mime}, no contents]"),
    }
}

/// The number of bytes base64 `data` decodes to.
fn decoded_len(data: &str) -> usize {
    let data = data.trim_end();
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    let chars = data.bytes().filter(|b| !b.is_ascii_whitespace()).count();
    (chars * 3 / 4).saturating_sub(padding)
}

/// The description of a server's `read_resource` tool, listing up to [`LISTED_RESOURCES`] of
/// `resources` (each `{uri, name, description?, mimeType?}` as JSON).
pub fn read_resource_description(resources: &[Value]) -> String {
    let mut out = String::from(
        "Read a resource of this MCP server by its URI (from this list, a link in a tool's \
         result, or a URI you know).",
    );
    if !resources.is_empty() {
        out.push_str(" Resources:");
    }
    for r in resources.iter().take(LISTED_RESOURCES) {
        let text = |key: &str| r.get(key).and_then(Value::as_str).unwrap_or_default();
        let about: String = text("description").chars().take(120).collect();
        out.push_str(&format!("\n- {} ({})", text("uri"), text("name")));
        if !about.is_empty() {
            out.push_str(&format!(": {about}"));
        }
    }
    if resources.len() > LISTED_RESOURCES {
        out.push_str(&format!(
            "\n… and {} more.",
            resources.len() - LISTED_RESOURCES
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_content_type_reaches_the_model() {
        let blocks = [
            json!({"type": "text", "text": "here"}),
            json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}),
            json!({"type": "audio", "data": "AAEC", "mimeType": "audio/wav"}),
            json!({"type": "resource", "resource": {"uri": "a://x", "mimeType": "text/plain", "text": "body"}}),
            json!({"type": "resource", "resource": {"uri": "a://b", "blob": "AAECAwQFBgcICQ=="}}),
            json!({"type": "resource_link", "uri": "a://r", "name": "readme"}),
            json!({"type": "hologram", "depth": 3}),
        ];
        assert_eq!(
            render(&blocks, None),
            "here\n[image: image/png, 8 bytes]\n[audio: audio/wav, 3 bytes]\n\
             [resource: a://x, text/plain]\nbody\n[resource: a://b, unknown type, 10 bytes]\n\
             [link: readme a://r]\n\
             [content of type `hologram`, which nop does not read: 29 bytes of JSON]"
        );
        assert_eq!(render(&[], Some(&json!({"n": 1}))), "{\"n\":1}");
        assert_eq!(render(&[], None), "");
    }

    #[test]
    fn the_resource_list_is_bounded() {
        let many: Vec<Value> = (0..30)
            .map(|i| json!({"uri": format!("a://{i}"), "name": format!("n{i}"), "description": "d".repeat(500)}))
            .collect();
        let text = read_resource_description(&many);
        assert!(text.contains("a://19 (n19)") && !text.contains("a://20 "));
        assert!(text.ends_with("… and 10 more."));
        assert!(text.len() < 4_000, "{}", text.len());
    }
}
