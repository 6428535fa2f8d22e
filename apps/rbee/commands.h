/* Sub-commands of the `rbee` command-line tool; each lives in its own
 * cmd_<name>.c file and returns a process exit code. */
#ifndef RBEE_APP_COMMANDS_H
#define RBEE_APP_COMMANDS_H

int rb_cmd_devices(int argc, char **argv);
int rb_cmd_bench_ops(int argc, char **argv);
int rb_cmd_logits(int argc, char **argv);
int rb_cmd_generate(int argc, char **argv);
int rb_cmd_convert(int argc, char **argv);
int rb_cmd_quantize(int argc, char **argv);
int rb_cmd_tokenize(int argc, char **argv);
int rb_cmd_detokenize(int argc, char **argv);
int rb_cmd_chat_render(int argc, char **argv);
int rb_cmd_bench(int argc, char **argv);
int rb_cmd_txt2img(int argc, char **argv);
int rb_cmd_img2img(int argc, char **argv);
int rb_cmd_inpaint(int argc, char **argv);
int rb_cmd_bench_sd(int argc, char **argv);

#endif
