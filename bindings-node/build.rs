//! Sets the linker flags a Node addon needs (napi symbols resolved at load).
fn main() {
    napi_build::setup();
}
