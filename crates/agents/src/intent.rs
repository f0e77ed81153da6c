//! Recognising questions that need no retrieval (greetings, arithmetic, questions about
//! the conversation), without a model.

use crate::crag::{collapse_ws, Decision};

/// Questions that need no retrieval, recognised without a model.
pub fn classify(query: &str) -> Option<Decision> {
    let q = normalize(query);
    let direct = |kind: &str, reason: &str, answer: Option<String>| {
        Some(Decision {
            retrieve: false,
            kind: kind.into(),
            reason: reason.into(),
            direct_answer: answer,
        })
    };
    if GREETINGS.contains(&q.as_str()) {
        return direct(
            "greeting",
            "a greeting or thanks: nothing to look up",
            Some(
                "Hello! Ask me a question about your documents and I will answer with citations."
                    .into(),
            ),
        );
    }
    if let Some(v) = arithmetic(&q) {
        return direct(
            "arithmetic",
            "arithmetic: computed, not looked up",
            Some(format_number(v)),
        );
    }
    if CONVERSATION.iter().any(|p| q.contains(p)) {
        return direct(
            "conversation",
            "a question about the conversation itself: answered from the session, not the documents",
            None,
        );
    }
    None
}

const GREETINGS: &[&str] = &[
    "hi",
    "hello",
    "hey",
    "hi there",
    "hello there",
    "good morning",
    "good afternoon",
    "good evening",
    "thanks",
    "thank you",
    "thank you very much",
    "thanks a lot",
    "ok thanks",
    "how are you",
    "who are you",
    "bye",
    "goodbye",
    "hola",
    "bonjour",
    "hallo",
    "ciao",
    "salut",
    "merci",
    "danke",
    "gracias",
    "guten tag",
    "buenos dias",
];

const CONVERSATION: &[&str] = &[
    "what did i ask",
    "what did i just ask",
    "what did you say",
    "what did you just say",
    "repeat that",
    "repeat your answer",
    "repeat your last answer",
    "my last question",
    "my previous question",
    "my first question",
    "our conversation",
    "this conversation",
    "what have we talked about",
    "what were we talking about",
];

/// Lower case, punctuation at the ends and repeated spaces removed.
fn normalize(q: &str) -> String {
    let t = q
        .trim()
        .trim_end_matches(['?', '!', '.', ' '])
        .trim_start_matches(['¿', '¡'])
        .to_lowercase();
    collapse_ws(&t)
}

/// The value of a question that is plain arithmetic ("what is 2 + 3 * 4", "7 divided by
/// 2"), if it is one.
pub fn arithmetic(q: &str) -> Option<f64> {
    let mut e = q.to_string();
    for p in [
        "what is ",
        "what's ",
        "whats ",
        "calculate ",
        "compute ",
        "how much is ",
    ] {
        if let Some(r) = e.strip_prefix(p) {
            e = r.to_string();
        }
    }
    let e = e.trim_end_matches(['=', ' ']);
    let e = e
        .replace("divided by", "/")
        .replace("multiplied by", "*")
        .replace(" times ", " * ")
        .replace(" plus ", " + ")
        .replace(" minus ", " - ")
        .replace(" x ", " * ")
        .replace('×', "*")
        .replace('÷', "/");
    if !e.chars().any(|c| c.is_ascii_digit())
        || !e.chars().any(|c| "+-*/^%".contains(c))
        || !e
            .chars()
            .all(|c| c.is_ascii_digit() || " .+-*/^%()".contains(c))
    {
        return None;
    }
    let toks: Vec<char> = e.chars().filter(|c| !c.is_whitespace()).collect();
    let mut p = Parser { t: &toks, i: 0 };
    let v = p.expr(0)?;
    (p.i == toks.len() && v.is_finite()).then_some(v)
}

fn format_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.10}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A recursive-descent parser for + - * / % ^ and parentheses (depth-capped).
struct Parser<'a> {
    t: &'a [char],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.t.get(self.i).copied()
    }
    fn expr(&mut self, depth: usize) -> Option<f64> {
        if depth > 64 {
            return None;
        }
        let mut v = self.term(depth)?;
        while let Some(c @ ('+' | '-')) = self.peek() {
            self.i += 1;
            let r = self.term(depth)?;
            v = if c == '+' { v + r } else { v - r };
        }
        Some(v)
    }
    fn term(&mut self, depth: usize) -> Option<f64> {
        let mut v = self.power(depth)?;
        while let Some(c @ ('*' | '/' | '%')) = self.peek() {
            self.i += 1;
            let r = self.power(depth)?;
            v = match c {
                '*' => v * r,
                '/' if r != 0.0 => v / r,
                '%' if r != 0.0 => v % r,
                _ => return None,
            };
        }
        Some(v)
    }
    fn power(&mut self, depth: usize) -> Option<f64> {
        let b = self.unary(depth)?;
        if self.peek() == Some('^') {
            self.i += 1;
            let e = self.power(depth + 1)?;
            return Some(b.powf(e));
        }
        Some(b)
    }
    fn unary(&mut self, depth: usize) -> Option<f64> {
        match self.peek()? {
            '-' => {
                self.i += 1;
                Some(-self.unary(depth + 1)?)
            }
            '(' => {
                self.i += 1;
                let v = self.expr(depth + 1)?;
                (self.peek() == Some(')')).then(|| {
                    self.i += 1;
                    v
                })
            }
            _ => {
                let s = self.i;
                while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
                    self.i += 1;
                }
                self.t[s..self.i].iter().collect::<String>().parse().ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_is_computed() {
        assert_eq!(arithmetic("what is 2 + 3 * 4"), Some(14.0));
        assert_eq!(arithmetic("7 divided by 2"), Some(3.5));
        assert_eq!(arithmetic("(1+2)^2"), Some(9.0));
        assert_eq!(arithmetic("-3 - -3"), Some(0.0));
        assert_eq!(arithmetic("1/0"), None);
        assert_eq!(arithmetic("what is 1990"), None);
        assert_eq!(arithmetic("what is covid-19"), None);
        assert_eq!(arithmetic(&"(".repeat(500)), None);
    }

    #[test]
    fn greetings_and_conversation_need_no_retrieval() {
        assert_eq!(classify("Hello!").unwrap().kind, "greeting");
        assert_eq!(classify("  thanks ").unwrap().kind, "greeting");
        assert_eq!(
            classify("What did I just ask?").unwrap().kind,
            "conversation"
        );
        assert_eq!(
            classify("what is 6 x 7?").unwrap().direct_answer.unwrap(),
            "42"
        );
        assert!(classify("What is the capital of France?").is_none());
        assert!(classify("¿Cuál es la capital de Francia?").is_none());
    }
}
