// Chat formats against real rendered prompts (../shared/data/chat_templates) and templates.
#include "model/tokenizer/chat_format.h"

#include <gtest/gtest.h>

#include "core/mapped_file.h"
#include "tests/test_util.h"

namespace laminar::model {
namespace {

const ChatMessage kSystem{"system", "You are a helpful assistant."};
const ChatMessage kUser1{"user", "Hello, how are you?"};
const ChatMessage kAssistant{"assistant", "I'm doing great. How can I help you today?"};
const ChatMessage kUser2{"user", "I'd like to show off how chat templating works!"};

void ExpectRendersLike(const std::vector<ChatMessage>& messages, const std::string& golden_rel) {
  std::string path = testing::SharedData(golden_rel);
  if (path.empty()) GTEST_SKIP() << LAMINAR_OUTSIDE_GOLDEN_SKIP << golden_rel;
  auto want = ReadFileToString(path);
  ASSERT_TRUE(want.ok()) << want.status();
  auto got = RenderChat(*ChatFormatFromName("chatml"), messages, true);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, *want) << golden_rel;
}

TEST(ChatFormatTest, ChatMLMatchesGoldens) {
  ExpectRendersLike({kUser1}, "chat_templates/chatml/user");
  ExpectRendersLike({kUser1, kAssistant, kUser2}, "chat_templates/chatml/user-assistant-user");
  ExpectRendersLike({kSystem, kUser1, kAssistant, kUser2},
                    "chat_templates/chatml/system-user-assistant-user");
}

TEST(ChatFormatTest, DetectsRealJinjaTemplates) {
  LAMINAR_FETCHED(qwen, "llama.cpp/templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  LAMINAR_FETCHED(llama, "llama.cpp/templates/meta-llama-Llama-3.1-8B-Instruct.jinja");
  auto q = DetectChatFormat(*ReadFileToString(qwen));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->kind, ChatFormatKind::kChatML);
  EXPECT_EQ(q->default_system,
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  auto l = DetectChatFormat(*ReadFileToString(llama));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->kind, ChatFormatKind::kLlama3);
  EXPECT_TRUE(l->llama3_dated_system);
}

TEST(ChatFormatTest, SmolLM2DefaultSystemFromTemplate) {
  // SmolLM2-135M-Instruct's template (GGUF tokenizer.chat_template), real newlines inside.
  std::string tmpl =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\n' }}{% endif %}";
  auto f = DetectChatFormat(tmpl);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->default_system,
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  std::vector<ChatMessage> conv = {{"user", "What is the capital of France?"}};
  EXPECT_EQ(*RenderChat(*f, conv, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(*RenderChat(*ChatFormatFromName("smollm2"), conv, true), *RenderChat(*f, conv, true));

  // A recipe's data.chat_format: "auto" reads the checkpoint's template, a name is a name, empty
  // is plain text, and "auto" without a template says so.
  auto resolved = ResolveChatFormat("auto", tmpl);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ASSERT_TRUE(resolved->has_value());
  EXPECT_EQ(*RenderChat(**resolved, conv, true), *RenderChat(*f, conv, true));
  EXPECT_EQ((*ResolveChatFormat("llama3", tmpl))->kind, ChatFormatKind::kLlama3);
  EXPECT_FALSE(ResolveChatFormat("", tmpl)->has_value());
  auto no_template = ResolveChatFormat("auto", "");
  ASSERT_FALSE(no_template.ok());
  EXPECT_NE(no_template.status().message().find("no chat template"), std::string::npos);
  EXPECT_FALSE(ResolveChatFormat("vicuna", tmpl).ok());
}

TEST(ChatFormatTest, Llama3) {
  std::vector<ChatMessage> conv = {kSystem, kUser1};
  EXPECT_EQ(*RenderChat(*ChatFormatFromName("llama3"), conv, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
            "assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello, how are "
            "you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  std::vector<ChatMessage> user_only = {kUser1};
  EXPECT_EQ(*RenderChat(*ChatFormatFromName("llama3.1"), user_only, false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge "
            "Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHello, how are you?<|eot_id|>");
}

TEST(ChatFormatTest, Llama2) {
  std::vector<ChatMessage> conv = {kSystem, kUser1, kAssistant, kUser2};
  EXPECT_EQ(*RenderChat(*ChatFormatFromName("llama2"), conv, true),
            "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello, how are you? "
            "[/INST] I'm doing great. How can I help you today? </s><s>[INST] I'd like to show off "
            "how chat templating works! [/INST]");
}

TEST(ChatFormatTest, BadInput) {
  auto chatml = *ChatFormatFromName("chatml");
  EXPECT_FALSE(RenderChat(chatml, {}, true).ok());
  std::vector<ChatMessage> bad_role = {{"tool", "x"}};
  auto r = RenderChat(chatml, bad_role, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("message 0 has role 'tool'"), std::string::npos);
  std::vector<ChatMessage> late_system = {kUser1, kSystem};
  EXPECT_FALSE(RenderChat(*ChatFormatFromName("llama3"), late_system, true).ok());
  std::vector<ChatMessage> two_users = {kUser1, kUser2};
  EXPECT_FALSE(RenderChat(*ChatFormatFromName("llama2"), two_users, true).ok());
  auto unknown = ChatFormatFromName("vicuna");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("chatml"), std::string::npos);
  EXPECT_FALSE(DetectChatFormat("{{ messages }}").ok());
}

}  // namespace
}  // namespace laminar::model
