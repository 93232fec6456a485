//! A parsed template, copied with every operator that can make a value
//! bigger than its operands turned into a call of a budgeted function, and
//! literal text turned into an emitted constant, so that everything a
//! render creates or writes passes through [`super::budget`].
//!
//! - `a + b`, `a * b` and `a ~ b` become `__add(a, b)`, `__mul(a, b)` and
//!   `__concat(a, b)` ([`ADD`], [`MUL`], [`CONCAT`]). A call is never
//!   constant-folded, so `"x" * 100000000` is no longer evaluated by the
//!   compiler either (it would be, at publish time, for a plain template).
//! - Literal text (`EmitRaw`) becomes `{{ "…" }}`, which the budgeted
//!   formatter writes; a loop repeating a long text is counted like any
//!   other output.
//!
//! minijinja's AST nodes can be built but not taken apart by value, so the
//! tree is copied. The matches are exhaustive over the features this crate
//! enables: a feature that adds a statement (macros, includes) breaks the
//! build here, which is the point — such a statement needs a review of what
//! it lets a template allocate.

use minijinja::{
    Value,
    machinery::ast::{self, BinOpKind, CallArg, CompareOp, Expr, Spanned, Stmt, UnaryOpKind},
};

/// The budgeted `+`.
pub const ADD: &str = "__add";
/// The budgeted `*`.
pub const MUL: &str = "__mul";
/// The budgeted `~`.
pub const CONCAT: &str = "__concat";

pub fn stmt<'a>(s: &Stmt<'a>) -> Stmt<'a> {
    match s {
        Stmt::Template(t) => Stmt::Template(Spanned::new(
            ast::Template {
                children: stmts(&t.children),
            },
            t.span(),
        )),
        Stmt::EmitExpr(e) => Stmt::EmitExpr(Spanned::new(
            ast::EmitExpr {
                expr: expr(&e.expr),
            },
            e.span(),
        )),
        Stmt::EmitRaw(r) => Stmt::EmitExpr(Spanned::new(
            ast::EmitExpr {
                expr: Expr::Const(Spanned::new(
                    ast::Const {
                        value: Value::from(r.raw),
                    },
                    r.span(),
                )),
            },
            r.span(),
        )),
        Stmt::ForLoop(f) => Stmt::ForLoop(Spanned::new(
            ast::ForLoop {
                target: expr(&f.target),
                iter: expr(&f.iter),
                filter_expr: f.filter_expr.as_ref().map(expr),
                recursive: f.recursive,
                body: stmts(&f.body),
                else_body: stmts(&f.else_body),
            },
            f.span(),
        )),
        Stmt::IfCond(c) => Stmt::IfCond(Spanned::new(
            ast::IfCond {
                expr: expr(&c.expr),
                true_body: stmts(&c.true_body),
                false_body: stmts(&c.false_body),
            },
            c.span(),
        )),
        Stmt::WithBlock(w) => Stmt::WithBlock(Spanned::new(
            ast::WithBlock {
                assignments: w
                    .assignments
                    .iter()
                    .map(|(target, value)| (expr(target), expr(value)))
                    .collect(),
                body: stmts(&w.body),
            },
            w.span(),
        )),
        Stmt::Set(s) => Stmt::Set(Spanned::new(
            ast::Set {
                target: expr(&s.target),
                expr: expr(&s.expr),
            },
            s.span(),
        )),
        Stmt::SetBlock(s) => Stmt::SetBlock(Spanned::new(
            ast::SetBlock {
                target: expr(&s.target),
                filter: s.filter.as_ref().map(expr),
                body: stmts(&s.body),
            },
            s.span(),
        )),
        Stmt::AutoEscape(a) => Stmt::AutoEscape(Spanned::new(
            ast::AutoEscape {
                enabled: expr(&a.enabled),
                body: stmts(&a.body),
            },
            a.span(),
        )),
        Stmt::FilterBlock(f) => Stmt::FilterBlock(Spanned::new(
            ast::FilterBlock {
                filter: expr(&f.filter),
                body: stmts(&f.body),
            },
            f.span(),
        )),
        Stmt::Do(d) => Stmt::Do(Spanned::new(
            ast::Do {
                call: call(&d.call),
            },
            d.span(),
        )),
    }
}

fn stmts<'a>(list: &[Stmt<'a>]) -> Vec<Stmt<'a>> {
    list.iter().map(stmt).collect()
}

pub fn expr<'a>(e: &Expr<'a>) -> Expr<'a> {
    match e {
        Expr::Var(v) => Expr::Var(Spanned::new(ast::Var { id: v.id }, v.span())),
        Expr::Const(c) => Expr::Const(Spanned::new(
            ast::Const {
                value: c.value.clone(),
            },
            c.span(),
        )),
        Expr::Slice(s) => Expr::Slice(Spanned::new(
            ast::Slice {
                expr: expr(&s.expr),
                start: s.start.as_ref().map(expr),
                stop: s.stop.as_ref().map(expr),
                step: s.step.as_ref().map(expr),
            },
            s.span(),
        )),
        Expr::UnaryOp(u) => Expr::UnaryOp(Spanned::new(
            ast::UnaryOp {
                op: match u.op {
                    UnaryOpKind::Not => UnaryOpKind::Not,
                    UnaryOpKind::Neg => UnaryOpKind::Neg,
                },
                expr: expr(&u.expr),
            },
            u.span(),
        )),
        Expr::BinOp(b) => {
            let budgeted = match b.op {
                BinOpKind::Add => Some(ADD),
                BinOpKind::Mul => Some(MUL),
                BinOpKind::Concat => Some(CONCAT),
                _ => None,
            };
            match budgeted {
                Some(name) => Expr::Call(Spanned::new(
                    ast::Call {
                        expr: Expr::Var(Spanned::new(ast::Var { id: name }, b.span())),
                        args: vec![CallArg::Pos(expr(&b.left)), CallArg::Pos(expr(&b.right))],
                    },
                    b.span(),
                )),
                None => Expr::BinOp(Spanned::new(
                    ast::BinOp {
                        op: b.op,
                        left: expr(&b.left),
                        right: expr(&b.right),
                    },
                    b.span(),
                )),
            }
        }
        Expr::Compare(c) => Expr::Compare(Spanned::new(
            ast::Compare {
                expr: expr(&c.expr),
                ops: c
                    .ops
                    .iter()
                    .map(|o| CompareOp {
                        op: o.op,
                        expr: expr(&o.expr),
                    })
                    .collect(),
            },
            c.span(),
        )),
        Expr::IfExpr(i) => Expr::IfExpr(Spanned::new(
            ast::IfExpr {
                test_expr: expr(&i.test_expr),
                true_expr: expr(&i.true_expr),
                false_expr: i.false_expr.as_ref().map(expr),
            },
            i.span(),
        )),
        Expr::Filter(f) => Expr::Filter(Spanned::new(
            ast::Filter {
                name: f.name,
                expr: f.expr.as_ref().map(expr),
                args: args(&f.args),
            },
            f.span(),
        )),
        Expr::Test(t) => Expr::Test(Spanned::new(
            ast::Test {
                name: t.name,
                expr: expr(&t.expr),
                args: args(&t.args),
            },
            t.span(),
        )),
        Expr::GetAttr(g) => Expr::GetAttr(Spanned::new(
            ast::GetAttr {
                expr: expr(&g.expr),
                name: g.name,
            },
            g.span(),
        )),
        Expr::GetItem(g) => Expr::GetItem(Spanned::new(
            ast::GetItem {
                expr: expr(&g.expr),
                subscript_expr: expr(&g.subscript_expr),
            },
            g.span(),
        )),
        Expr::Call(c) => Expr::Call(call(c)),
        Expr::List(l) => Expr::List(Spanned::new(
            ast::List {
                items: l.items.iter().map(expr).collect(),
            },
            l.span(),
        )),
        Expr::Tuple(t) => Expr::Tuple(Spanned::new(
            ast::Tuple {
                items: t.items.iter().map(expr).collect(),
            },
            t.span(),
        )),
        Expr::Map(m) => Expr::Map(Spanned::new(
            ast::Map {
                keys: m.keys.iter().map(expr).collect(),
                values: m.values.iter().map(expr).collect(),
            },
            m.span(),
        )),
    }
}

fn call<'a>(c: &Spanned<ast::Call<'a>>) -> Spanned<ast::Call<'a>> {
    Spanned::new(
        ast::Call {
            expr: expr(&c.expr),
            args: args(&c.args),
        },
        c.span(),
    )
}

fn args<'a>(list: &[CallArg<'a>]) -> Vec<CallArg<'a>> {
    list.iter()
        .map(|a| match a {
            CallArg::Pos(e) => CallArg::Pos(expr(e)),
            CallArg::Kwarg(name, e) => CallArg::Kwarg(name, expr(e)),
            CallArg::PosSplat(e) => CallArg::PosSplat(expr(e)),
            CallArg::KwargSplat(e) => CallArg::KwargSplat(expr(e)),
        })
        .collect()
}
