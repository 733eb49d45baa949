//! `#[ffi_guard]`: the panic boundary of each `extern "C"` function of `kreplay-capi`, written once.
//!
//! The attribute leaves the function's signature as it is (cbindgen reads the unexpanded source and sees an
//! ordinary `#[unsafe(no_mangle)] pub extern "C" fn`) and wraps its body in `crate::boundary::run`, with the
//! function's own name, taken from its identifier, for the log line of a caught panic. What the call returns
//! after a panic comes from the return type (`crate::boundary::OnPanic`). The design and why it was chosen
//! are in `capi/src/boundary.rs`.
//!
//! `#[ffi_guard(fast_path = check)]` first calls `check()`, a function that must not panic and returns
//! `Option<T>` for the function's return type `T`: `Some(answer)` is returned at once, outside the boundary;
//! on `None` the guarded body runs in an `#[inline(never)]` inner function, so that the fast path needs no
//! stack frame of its own. This crate depends on nothing but `proc_macro`: it only splits a signature from a
//! body.

use proc_macro::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};

/// Runs the body of the exported function it is put on inside the C boundary; see the crate documentation.
#[proc_macro_attribute]
pub fn ffi_guard(attribute: TokenStream, item: TokenStream) -> TokenStream {
    match expand(attribute, item) {
        Ok(tokens) => tokens,
        Err(message) => error(&message),
    }
}

/// The pieces of a function the attribute needs: everything before the body, the name, the parameters and
/// the body itself.
struct Function {
    signature: Vec<TokenTree>,
    name: Ident,
    parameters: Group,
    body: Group,
}

fn expand(attribute: TokenStream, item: TokenStream) -> Result<TokenStream, String> {
    let fast_path = parse_fast_path(attribute)?;
    let function = parse_function(item)?;
    // The body keeps its own tokens (and so its spans: errors in it point at its lines).
    let mut guarded = code("crate::boundary::run")?;
    let mut call = TokenStream::from(TokenTree::Literal(Literal::string(&plain_name(&function.name))));
    call.extend(code(", ||")?);
    call.extend([TokenTree::Group(function.body)]);
    guarded.extend([TokenTree::Group(Group::new(Delimiter::Parenthesis, call))]);
    let body = match fast_path {
        None => guarded,
        Some(check) => {
            let mut body = code(&format!(
                "if let ::core::option::Option::Some(answer) = {check}() {{ return answer; }} \
                 #[inline(never)] fn guarded{parameters} -> {output}",
                parameters = function.parameters,
                output = return_type(&function.signature),
            ))?;
            body.extend([TokenTree::Group(Group::new(Delimiter::Brace, guarded))]);
            body.extend(code(&format!("guarded({})", argument_names(&function.parameters)?))?);
            body
        }
    };
    let mut tokens: TokenStream = function.signature.into_iter().collect();
    tokens.extend([TokenTree::Group(Group::new(Delimiter::Brace, body))]);
    Ok(tokens)
}

fn code(text: &str) -> Result<TokenStream, String> {
    text.parse().map_err(|_| format!("ffi_guard: `{text}` does not parse"))
}

/// `fast_path = path`, or nothing.
fn parse_fast_path(attribute: TokenStream) -> Result<Option<String>, String> {
    let tokens: Vec<TokenTree> = attribute.into_iter().collect();
    match tokens.split_first() {
        None => Ok(None),
        Some((TokenTree::Ident(key), rest)) if key.to_string() == "fast_path" => match rest.split_first() {
            Some((TokenTree::Punct(eq), path)) if eq.as_char() == '=' && !path.is_empty() => {
                Ok(Some(path.iter().cloned().collect::<TokenStream>().to_string()))
            }
            _ => Err("ffi_guard: expected `fast_path = path::to::check`".into()),
        },
        _ => Err("ffi_guard: the only argument is `fast_path = path::to::check`".into()),
    }
}

fn parse_function(item: TokenStream) -> Result<Function, String> {
    let mut signature: Vec<TokenTree> = item.into_iter().collect();
    let Some(TokenTree::Group(body)) = signature.pop() else {
        return Err("ffi_guard: expected a function with a body".into());
    };
    if body.delimiter() != Delimiter::Brace {
        return Err("ffi_guard: expected a function with a body".into());
    }
    let at_fn = signature
        .iter()
        .position(|token| matches!(token, TokenTree::Ident(ident) if ident.to_string() == "fn"))
        .ok_or("ffi_guard: expected a function")?;
    let (Some(TokenTree::Ident(name)), Some(TokenTree::Group(parameters))) =
        (signature.get(at_fn + 1), signature.get(at_fn + 2))
    else {
        return Err("ffi_guard: expected `fn name(parameters)` without generics".into());
    };
    if parameters.delimiter() != Delimiter::Parenthesis {
        return Err("ffi_guard: expected `fn name(parameters)` without generics".into());
    }
    let (name, parameters) = (name.clone(), parameters.clone());
    Ok(Function { signature, name, parameters, body })
}

/// What follows `->` in the signature, or `()`.
fn return_type(signature: &[TokenTree]) -> String {
    let arrow = signature.windows(2).position(|pair| match pair {
        [TokenTree::Punct(minus), TokenTree::Punct(greater)] => {
            minus.as_char() == '-' && minus.spacing() == Spacing::Joint && greater.as_char() == '>'
        }
        _ => false,
    });
    match arrow {
        None => "()".into(),
        Some(at) => signature[at + 2..].iter().cloned().collect::<TokenStream>().to_string(),
    }
}

/// The names of the parameters, comma-separated, to pass them on unchanged. Each parameter must be a plain
/// name (`x: T`, `r#type: T`).
fn argument_names(parameters: &Group) -> Result<String, String> {
    let mut names = Vec::new();
    let mut expect_name = true;
    let mut angle_depth = 0usize;
    let mut previous_joint_minus = false;
    for token in parameters.stream() {
        let joint_minus = matches!(&token, TokenTree::Punct(p) if p.as_char() == '-' && p.spacing() == Spacing::Joint);
        match &token {
            TokenTree::Ident(name) if expect_name && !matches!(name.to_string().as_str(), "mut" | "_") => {
                names.push(name.to_string());
                expect_name = false;
            }
            TokenTree::Punct(p) if p.as_char() == '<' => angle_depth += 1,
            // The `>` of `->` in a function-pointer type closes nothing.
            TokenTree::Punct(p) if p.as_char() == '>' && !previous_joint_minus => {
                angle_depth = angle_depth.saturating_sub(1)
            }
            TokenTree::Punct(p) if p.as_char() == ',' && angle_depth == 0 => expect_name = true,
            _ if expect_name => return Err("ffi_guard: with `fast_path`, every parameter must be a plain name".into()),
            _ => {}
        }
        previous_joint_minus = joint_minus;
    }
    Ok(names.join(", "))
}

/// The function's name as C sees it (without a raw identifier's `r#`).
fn plain_name(name: &Ident) -> String {
    let name = name.to_string();
    name.strip_prefix("r#").unwrap_or(&name).to_string()
}

fn error(message: &str) -> TokenStream {
    let span = Span::call_site();
    let text = Literal::string(message);
    let bang = TokenTree::Punct(Punct::new('!', Spacing::Alone));
    let call = TokenTree::Group(Group::new(Delimiter::Parenthesis, TokenTree::Literal(text).into()));
    let semicolon = TokenTree::Punct(Punct::new(';', Spacing::Alone));
    [TokenTree::Ident(Ident::new("compile_error", span)), bang, call, semicolon].into_iter().collect()
}
