/* Compiler identification source CMake writes for CUDA (a short stand-in). */
char const* info_compiler = "INFO" ":" "compiler[NVIDIA]";
int main(int argc, char* argv[]) { return info_compiler[argc]; }
