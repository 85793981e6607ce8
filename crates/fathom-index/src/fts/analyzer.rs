//! Text analysis as pylance 14 does it: a base tokenizer, then (each one
//! optional, in this order) long tokens removed, lower-casing, stemming,
//! stop words and ASCII folding. Positions count the base tokenizer's
//! tokens, so a removed stop word still takes a position (phrase queries
//! see the gap).

use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::UnicodeNormalization;

use crate::error::{Error, Result};

/// The base tokenizer.
#[derive(Debug, Clone, PartialEq)]
pub enum BaseTokenizer {
    /// Runs of alphanumeric characters (the default).
    Simple,
    /// Runs of non-whitespace characters.
    Whitespace,
    /// The whole value is one token.
    Raw,
    /// Character n-grams of the whole value.
    Ngram {
        min: usize,
        max: usize,
        prefix_only: bool,
    },
}

impl BaseTokenizer {
    pub fn name(&self) -> &'static str {
        match self {
            BaseTokenizer::Simple => "simple",
            BaseTokenizer::Whitespace => "whitespace",
            BaseTokenizer::Raw => "raw",
            BaseTokenizer::Ngram { .. } => "ngram",
        }
    }
}

/// An inverted index's analysis parameters (Lance's `InvertedIndexParams`).
#[derive(Debug, Clone, PartialEq)]
pub struct FtsParams {
    pub base_tokenizer: BaseTokenizer,
    /// Snowball language name, e.g. `English`.
    pub language: String,
    pub with_position: bool,
    /// Tokens of this many bytes or more are dropped (`None`: no limit).
    pub max_token_length: Option<usize>,
    pub lower_case: bool,
    pub stem: bool,
    pub remove_stop_words: bool,
    pub custom_stop_words: Option<Vec<String>>,
    pub ascii_folding: bool,
}

impl Default for FtsParams {
    fn default() -> Self {
        FtsParams {
            base_tokenizer: BaseTokenizer::Simple,
            language: "English".into(),
            with_position: false,
            max_token_length: Some(40),
            lower_case: true,
            stem: true,
            remove_stop_words: true,
            custom_stop_words: None,
            ascii_folding: true,
        }
    }
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "on" | "yes" => Ok(true),
        "false" | "0" | "off" | "no" => Ok(false),
        _ => Err(Error::InvalidInput(format!(
            "option '{key}' must be true or false, not '{v}'"
        ))),
    }
}

fn parse_usize(key: &str, v: &str) -> Result<usize> {
    v.parse().map_err(|_| {
        Error::InvalidInput(format!(
            "option '{key}' must be a non-negative integer, not '{v}'"
        ))
    })
}

/// Languages with a Snowball stemmer.
fn algorithm(language: &str) -> Option<Algorithm> {
    Some(match language.to_ascii_lowercase().as_str() {
        "arabic" => Algorithm::Arabic,
        "danish" => Algorithm::Danish,
        "dutch" => Algorithm::Dutch,
        "english" => Algorithm::English,
        "finnish" => Algorithm::Finnish,
        "french" => Algorithm::French,
        "german" => Algorithm::German,
        "greek" => Algorithm::Greek,
        "hungarian" => Algorithm::Hungarian,
        "italian" => Algorithm::Italian,
        "norwegian" => Algorithm::Norwegian,
        "portuguese" => Algorithm::Portuguese,
        "romanian" => Algorithm::Romanian,
        "russian" => Algorithm::Russian,
        "spanish" => Algorithm::Spanish,
        "swedish" => Algorithm::Swedish,
        "tamil" => Algorithm::Tamil,
        "turkish" => Algorithm::Turkish,
        _ => return None,
    })
}

impl FtsParams {
    /// Parameters from `CREATE INDEX ... USING INVERTED (col) WITH (...)`
    /// options (Lance's names; unknown names are an error).
    pub fn from_options(options: &[(String, String)]) -> Result<FtsParams> {
        let mut p = FtsParams::default();
        let get = |k: &str| {
            options
                .iter()
                .rev()
                .find(|(key, _)| key.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.as_str())
        };
        let (mut min, mut max, mut prefix_only) = (3, 3, false);
        for (key, v) in options {
            match key.to_ascii_lowercase().as_str() {
                "base_tokenizer" => {}
                "language" => p.language = v.clone(),
                "with_position" => p.with_position = parse_bool(key, v)?,
                "max_token_length" => {
                    p.max_token_length = match v.to_ascii_lowercase().as_str() {
                        "none" | "null" | "0" => None,
                        _ => Some(parse_usize(key, v)?),
                    }
                }
                "lower_case" => p.lower_case = parse_bool(key, v)?,
                "stem" => p.stem = parse_bool(key, v)?,
                "remove_stop_words" => p.remove_stop_words = parse_bool(key, v)?,
                "custom_stop_words" => {
                    p.custom_stop_words = Some(
                        v.split(',')
                            .map(|w| w.trim().to_string())
                            .filter(|w| !w.is_empty())
                            .collect(),
                    )
                }
                "ascii_folding" => p.ascii_folding = parse_bool(key, v)?,
                "min_ngram_length" => min = parse_usize(key, v)?,
                "max_ngram_length" => max = parse_usize(key, v)?,
                "prefix_only" => prefix_only = parse_bool(key, v)?,
                _ => {
                    return Err(Error::InvalidInput(format!(
                        "unknown option '{key}' for an INVERTED index (known: base_tokenizer, \
                         language, with_position, max_token_length, lower_case, stem, \
                         remove_stop_words, custom_stop_words, ascii_folding, \
                         min_ngram_length, max_ngram_length, prefix_only)"
                    )));
                }
            }
        }
        p.base_tokenizer = match get("base_tokenizer").map(|s| s.to_ascii_lowercase()) {
            None => BaseTokenizer::Simple,
            Some(s) if s == "simple" => BaseTokenizer::Simple,
            Some(s) if s == "whitespace" => BaseTokenizer::Whitespace,
            Some(s) if s == "raw" => BaseTokenizer::Raw,
            Some(s) if s == "ngram" => {
                if min == 0 || min > max {
                    return Err(Error::InvalidInput(format!(
                        "ngram lengths must satisfy 0 < min_ngram_length <= max_ngram_length \
                         (got {min} and {max})"
                    )));
                }
                // As Lance: n-grams keep every substring searchable.
                if get("stem").is_none() {
                    p.stem = false;
                }
                if get("remove_stop_words").is_none() {
                    p.remove_stop_words = false;
                }
                BaseTokenizer::Ngram {
                    min,
                    max,
                    prefix_only,
                }
            }
            Some(other) => {
                return Err(Error::InvalidInput(format!(
                    "unknown base_tokenizer '{other}' (supported: simple, whitespace, raw, ngram)"
                )));
            }
        };
        if p.with_position && matches!(p.base_tokenizer, BaseTokenizer::Ngram { .. }) {
            return Err(Error::InvalidInput(
                "with_position does not apply to the ngram tokenizer".into(),
            ));
        }
        Analyzer::new(&p)?;
        Ok(p)
    }

    /// The `params` JSON pylance writes in `metadata.lance` (same keys,
    /// same order).
    pub fn to_json(&self) -> String {
        let (min, max, prefix) = match self.base_tokenizer {
            BaseTokenizer::Ngram {
                min,
                max,
                prefix_only,
            } => (min, max, prefix_only),
            _ => (3, 3, false),
        };
        let stop = match &self.custom_stop_words {
            None => "null".to_string(),
            Some(w) => serde_json::to_string(w).unwrap_or_else(|_| "null".into()),
        };
        let max_len = self
            .max_token_length
            .map_or("null".to_string(), |n| n.to_string());
        format!(
            "{{\"lance_tokenizer\":\"text\",\"base_tokenizer\":{},\"language\":{},\
             \"with_position\":{},\"max_token_length\":{max_len},\"lower_case\":{},\"stem\":{},\
             \"remove_stop_words\":{},\"custom_stop_words\":{stop},\"ascii_folding\":{},\
             \"min_ngram_length\":{min},\"max_ngram_length\":{max},\"prefix_only\":{prefix},\
             \"block_size\":128,\"split_identifiers\":false,\"split_on_numerics\":false,\
             \"preserve_original\":false,\"index_operators\":false}}",
            serde_json::Value::from(self.base_tokenizer.name()),
            serde_json::Value::from(self.language.as_str()),
            self.with_position,
            self.lower_case,
            self.stem,
            self.remove_stop_words,
            self.ascii_folding,
        )
    }

    /// Parameters from a `params` JSON (pylance's or ours); missing keys
    /// take Lance's defaults.
    pub fn from_json(json: &str) -> Result<FtsParams> {
        let v: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| Error::InvalidInput(format!("inverted index params: {e}")))?;
        let d = FtsParams::default();
        let b = |k: &str, def: bool| v.get(k).and_then(|x| x.as_bool()).unwrap_or(def);
        let n = |k: &str, def: usize| {
            v.get(k)
                .and_then(|x| x.as_u64())
                .map_or(def, |x| x as usize)
        };
        let base = v
            .get("base_tokenizer")
            .and_then(|x| x.as_str())
            .unwrap_or("simple");
        let base_tokenizer = match base {
            "simple" => BaseTokenizer::Simple,
            "whitespace" => BaseTokenizer::Whitespace,
            "raw" => BaseTokenizer::Raw,
            "ngram" => BaseTokenizer::Ngram {
                min: n("min_ngram_length", 3),
                max: n("max_ngram_length", 3),
                prefix_only: b("prefix_only", false),
            },
            other => {
                return Err(Error::InvalidInput(format!(
                    "inverted index uses base tokenizer '{other}', which Fathom does not \
                     implement (supported: simple, whitespace, raw, ngram)"
                )));
            }
        };
        if let Some(t) = v.get("lance_tokenizer").and_then(|x| x.as_str())
            && t != "text"
        {
            return Err(Error::InvalidInput(format!(
                "inverted index uses document tokenizer '{t}'; Fathom reads only 'text'"
            )));
        }
        Ok(FtsParams {
            base_tokenizer,
            language: v
                .get("language")
                .and_then(|x| x.as_str())
                .unwrap_or("English")
                .to_string(),
            with_position: b("with_position", false),
            max_token_length: match v.get("max_token_length") {
                Some(serde_json::Value::Null) => None,
                Some(x) => x.as_u64().map(|x| x as usize),
                None => d.max_token_length,
            },
            lower_case: b("lower_case", true),
            stem: b("stem", true),
            remove_stop_words: b("remove_stop_words", true),
            custom_stop_words: v.get("custom_stop_words").and_then(|x| {
                x.as_array().map(|a| {
                    a.iter()
                        .filter_map(|w| w.as_str().map(str::to_string))
                        .collect()
                })
            }),
            ascii_folding: b("ascii_folding", true),
        })
    }
}

/// English stop words as pylance 14 removes them (checked against it one
/// word at a time: a row holding only the word yields no document). The
/// filter runs after stemming, so a word is removed when its stem is here
/// ("having" -> "have").
pub const ENGLISH_STOP_WORDS: &[&str] = &[
    "a", "about", "after", "again", "against", "all", "am", "an", "and", "are", "as", "at", "be",
    "been", "being", "below", "between", "both", "but", "by", "can", "did", "do", "doing", "down",
    "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her", "here",
    "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its",
    "itself", "just", "me", "more", "most", "my", "myself", "now", "of", "off", "on", "or",
    "other", "our", "ours", "out", "over", "own", "re", "same", "she", "should", "so", "some",
    "such", "than", "that", "the", "their", "theirs", "them", "then", "there", "these", "they",
    "this", "those", "through", "to", "too", "under", "until", "up", "was", "we", "were", "what",
    "when", "where", "which", "while", "who", "whom", "will", "with", "you", "your", "yours",
    "yourself",
];

/// Turns text into tokens with positions.
pub struct Analyzer {
    params: FtsParams,
    stemmer: Option<Stemmer>,
    stop: rustc_hash::FxHashSet<String>,
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer")
            .field("params", &self.params)
            .finish()
    }
}

impl Analyzer {
    pub fn new(params: &FtsParams) -> Result<Analyzer> {
        let stemmer = if params.stem {
            Some(Stemmer::create(algorithm(&params.language).ok_or_else(
                || {
                    Error::InvalidInput(format!(
                        "no stemmer for language '{}' (set stem = false, or use one of \
                         Arabic, Danish, Dutch, English, Finnish, French, German, Greek, \
                         Hungarian, Italian, Norwegian, Portuguese, Romanian, Russian, \
                         Spanish, Swedish, Tamil, Turkish)",
                        params.language
                    ))
                },
            )?))
        } else {
            None
        };
        let stop = if !params.remove_stop_words {
            Default::default()
        } else if let Some(words) = &params.custom_stop_words {
            words.iter().cloned().collect()
        } else if params.language.eq_ignore_ascii_case("english") {
            ENGLISH_STOP_WORDS.iter().map(|w| w.to_string()).collect()
        } else {
            return Err(Error::InvalidInput(format!(
                "no built-in stop words for language '{}' (set remove_stop_words = false \
                 or give custom_stop_words)",
                params.language
            )));
        };
        Ok(Analyzer {
            params: params.clone(),
            stemmer,
            stop,
        })
    }

    pub fn params(&self) -> &FtsParams {
        &self.params
    }

    /// Calls `emit(token, position)` for each token of `text`.
    pub fn analyze(&self, text: &str, mut emit: impl FnMut(&str, u32)) {
        let mut position = 0u32;
        let mut each = |raw: &str| {
            let pos = position;
            position += 1;
            if let Some(t) = self.filter(raw) {
                emit(&t, pos);
            }
        };
        match &self.params.base_tokenizer {
            BaseTokenizer::Simple => text
                .split(|c: char| !c.is_alphanumeric())
                .filter(|t| !t.is_empty())
                .for_each(&mut each),
            BaseTokenizer::Whitespace => text
                .split(|c: char| c.is_ascii_whitespace())
                .filter(|t| !t.is_empty())
                .for_each(&mut each),
            BaseTokenizer::Raw => each(text),
            BaseTokenizer::Ngram {
                min,
                max,
                prefix_only,
            } => {
                let bounds: Vec<usize> = text
                    .char_indices()
                    .map(|(i, _)| i)
                    .chain(std::iter::once(text.len()))
                    .collect();
                let chars = bounds.len() - 1;
                let starts = if *prefix_only { chars.min(1) } else { chars };
                for s in 0..starts {
                    for n in *min..=*max {
                        if s + n > chars {
                            break;
                        }
                        each(&text[bounds[s]..bounds[s + n]]);
                    }
                }
            }
        }
    }

    /// Tokens of `text` (positions dropped), in order.
    pub fn tokens(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.analyze(text, |t, _| out.push(t.to_string()));
        out
    }

    fn filter(&self, raw: &str) -> Option<String> {
        if let Some(limit) = self.params.max_token_length
            && raw.len() >= limit
        {
            return None;
        }
        let mut t = if !self.params.lower_case {
            raw.to_string()
        } else if raw.is_ascii() {
            raw.to_ascii_lowercase()
        } else {
            raw.to_lowercase()
        };
        if let Some(s) = &self.stemmer
            && let std::borrow::Cow::Owned(stemmed) = s.stem(&t)
        {
            t = stemmed;
        }
        if self.stop.contains(&t) {
            return None;
        }
        if self.params.ascii_folding && !t.is_ascii() {
            t = fold(&t);
        }
        Some(t)
    }
}

/// ASCII folding: letters with diacritics lose them (NFKD, marks
/// dropped), ligatures and letters without a decomposition map to their
/// usual Latin spelling; anything else is kept.
pub fn fold(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii() {
            out.push(c);
            continue;
        }
        let special = match c {
            'ß' => Some("ss"),
            'æ' => Some("ae"),
            'Æ' => Some("AE"),
            'ø' => Some("o"),
            'Ø' => Some("O"),
            'œ' => Some("oe"),
            'Œ' => Some("OE"),
            'đ' | 'ð' => Some("d"),
            'Đ' | 'Ð' => Some("D"),
            'ł' => Some("l"),
            'Ł' => Some("L"),
            'þ' => Some("th"),
            'Þ' => Some("TH"),
            'ı' => Some("i"),
            'ħ' => Some("h"),
            'Ħ' => Some("H"),
            'ŧ' => Some("t"),
            'Ŧ' => Some("T"),
            'ŀ' => Some("l"),
            'Ŀ' => Some("L"),
            'ĸ' => Some("q"),
            _ => None,
        };
        if let Some(r) = special {
            out.push_str(r);
            continue;
        }
        let mut decomposed = c.to_string().nfkd().collect::<Vec<char>>();
        if decomposed
            .first()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        {
            decomposed.retain(|d| d.is_ascii());
            out.extend(decomposed);
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(text: &str) -> Vec<String> {
        Analyzer::new(&FtsParams::default()).unwrap().tokens(text)
    }

    #[test]
    fn default_analysis_matches_pylance() {
        // research: lance-index-bytes.md 3.8 / 3.9
        assert_eq!(toks("The quick brown fox"), ["quick", "brown", "fox"]);
        assert_eq!(toks("The lazy dog runs"), ["lazi", "dog", "run"]);
        assert_eq!(
            toks("quick quick dog jumping over the fox"),
            ["quick", "quick", "dog", "jump", "fox"]
        );
        assert_eq!(
            toks("Café naïve CAFE apples"),
            ["cafe", "naiv", "cafe", "appl"]
        );
        assert_eq!(toks("fox 3"), ["fox", "3"]);
        assert!(toks("the over the the").is_empty());
        assert!(toks("having").is_empty());
        let long = "x".repeat(40);
        assert_eq!(
            toks(&format!("{long} ok {}", "y".repeat(39))),
            ["ok".to_string(), "y".repeat(39)]
        );
    }

    #[test]
    fn positions_count_removed_words() {
        let a = Analyzer::new(&FtsParams::default()).unwrap();
        let mut got = vec![];
        a.analyze("The quick brown fox", |t, p| got.push((t.to_string(), p)));
        assert_eq!(
            got,
            [("quick".into(), 1), ("brown".into(), 2), ("fox".into(), 3)]
        );
    }

    #[test]
    fn options_and_json() {
        let p = FtsParams::default();
        assert_eq!(
            p.to_json(),
            "{\"lance_tokenizer\":\"text\",\"base_tokenizer\":\"simple\",\"language\":\"English\",\
             \"with_position\":false,\"max_token_length\":40,\"lower_case\":true,\"stem\":true,\
             \"remove_stop_words\":true,\"custom_stop_words\":null,\"ascii_folding\":true,\
             \"min_ngram_length\":3,\"max_ngram_length\":3,\"prefix_only\":false,\
             \"block_size\":128,\"split_identifiers\":false,\"split_on_numerics\":false,\
             \"preserve_original\":false,\"index_operators\":false}"
        );
        assert_eq!(FtsParams::from_json(&p.to_json()).unwrap(), p);
        let o = |k: &str, v: &str| (k.to_string(), v.to_string());
        let q =
            FtsParams::from_options(&[o("base_tokenizer", "ngram"), o("max_ngram_length", "4")])
                .unwrap();
        assert!(!q.stem && !q.remove_stop_words);
        assert_eq!(FtsParams::from_json(&q.to_json()).unwrap(), q);
        let a = Analyzer::new(&q).unwrap();
        assert_eq!(a.tokens("Abcd"), ["abc", "abcd", "bcd"]);
        let w = FtsParams::from_options(&[
            o("base_tokenizer", "whitespace"),
            o("stem", "false"),
            o("custom_stop_words", "foo, bar"),
        ])
        .unwrap();
        assert_eq!(
            Analyzer::new(&w).unwrap().tokens("foo-x bar Baz"),
            ["foo-x", "baz"]
        );
        for bad in [
            vec![o("base_tokenizer", "icu")],
            vec![o("stem", "maybe")],
            vec![o("colour", "red")],
            vec![o("language", "Klingon")],
            vec![o("base_tokenizer", "ngram"), o("min_ngram_length", "5")],
        ] {
            assert!(FtsParams::from_options(&bad).is_err(), "{bad:?}");
        }
    }
}
