//! `{param}` placeholders in item commands.

use super::ParamValues;

/// A string with `{name}` placeholders; `{{` and `}}` stand for literal braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Param(String),
}

impl Template {
    /// Parses `text`; placeholders must name one of `known`.
    pub fn parse(text: &str, known: &[&str]) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut text_buf = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    text_buf.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    text_buf.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => return Err(format!("unclosed `{{` in {text:?}")),
                        }
                    }
                    if !known.contains(&name.as_str()) {
                        return Err(format!(
                            "placeholder `{{{name}}}` names no parameter of this item (write `{{{{` for a literal brace)"
                        ));
                    }
                    if !text_buf.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text_buf)));
                    }
                    parts.push(Part::Param(name));
                }
                '}' => return Err(format!("lone `}}` in {text:?} (write `}}}}`)")),
                c => text_buf.push(c),
            }
        }
        if !text_buf.is_empty() {
            parts.push(Part::Text(text_buf));
        }
        Ok(Template { parts })
    }

    /// The text with `values` in place of the placeholders.
    pub fn render(&self, values: &ParamValues) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Param(name) => {
                    // Parsing checked every name; a value is always there.
                    if let Some(v) = values.get(name) {
                        out.push_str(&v.to_string());
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_placeholders_and_keeps_escaped_braces() {
        let t = Template::parse("get {size} x{{y}} {n}", &["size", "n"]).unwrap();
        let values = ParamValues::from([("size".into(), 64), ("n".into(), -2)]);
        assert_eq!(t.render(&values), "get 64 x{y} -2");
    }

    #[test]
    fn rejects_unknown_and_unbalanced_placeholders() {
        assert!(
            Template::parse("{nope}", &["size"])
                .unwrap_err()
                .contains("nope")
        );
        assert!(Template::parse("{size", &["size"]).is_err());
        assert!(Template::parse("a } b", &["size"]).is_err());
    }
}
