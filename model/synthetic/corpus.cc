// The text the synthetic tokenizer learns its merges from: short stories, arithmetic with worked
// answers, and chat-shaped turns, written for this project. Its words are the ones the tests use
// ("cat", "dog", numbers, "The answer is"), so they come out as few tokens.
#include "model/synthetic/synthetic_model.h"

namespace laminar::model {

std::string_view SyntheticCorpus() {
  static constexpr std::string_view kText = R"corpus(
Once upon a time there was a little cat who lived in a small house by the river.
The cat liked to sit in the sun and watch the birds fly over the water.
One day the cat saw a big dog running along the road. The dog was happy and wanted to play.
"Hello, cat," said the dog. "Will you come and play with me?"
The cat was shy, but she said yes. They ran to the park and played all day.
When the sun went down, the cat and the dog walked home together. They were good friends.
Lily was a girl who loved to read books. Every night her mother read her a story.
Tom had a red ball and a blue kite. He took them to the park to play with his friends.
The sun was warm and the sky was blue. The children laughed and sang songs under the tree.
A little girl found a shiny stone in the garden. She showed it to her brother and they smiled.
The dog barked at the cat, and the cat ran up the tree. Then the dog said sorry and they made up.
The bird sang a happy song. The fish swam in the pond. The frog jumped on a green leaf.
One day it rained and the children stayed inside. They built a house out of boxes and blankets.
The old man planted seeds in the spring. In the summer the garden was full of flowers.
The cat said, "I am hungry." The dog gave the cat some of his food, and the cat was happy.
Question: Tom has 3 apples and buys 5 more. How many apples does he have?
Answer: Tom starts with 3 apples. He buys 5 more, so 3 + 5 = 8. The answer is 8.
#### 8
Question: A box holds 12 pencils. How many pencils are in 4 boxes?
Answer: Each box holds 12 pencils, so 4 boxes hold 4 * 12 = 48 pencils. The answer is 48.
#### 48
Question: Sara had 20 dollars and spent 7 dollars on a book. How much money is left?
Answer: She had 20 dollars and spent 7, so 20 - 7 = 13. The answer is 13.
#### 13
Question: A farm has 1,250 chickens and sells 250 of them. How many chickens are left?
Answer: 1,250 - 250 = 1,000 chickens are left. The answer is 1000.
#### 1000
Question: The temperature was 5 degrees and fell by 9 degrees. What is the temperature now?
Answer: 5 - 9 = -4, so the temperature is -4 degrees. The answer is -4.
#### -4
Question: What is 17 + 25?
Answer: 17 + 25 = 42. The answer is \boxed{42}.
Question: Simplify 6/8.
Answer: Divide the top and the bottom by 2: 6/8 = 3/4. The answer is \boxed{\frac{3}{4}}.
Question: Solve x + 3 = 10.
Answer: Subtract 3 from both sides: x = 7. The answer is \boxed{7}.
Question: Using the numbers 30, 100 and 93, make 23.
Answer: 100 - 93 = 7, and 30 - 7 = 23. The equation is 30 - (100 - 93) = 23.
<answer>30 - (100 - 93)</answer>
Question: Using the numbers 4, 6 and 10, make 20.
Answer: 4 + 6 = 10, and 10 + 10 = 20. The equation is 4 + 6 + 10 = 20.
<answer>4 + 6 + 10</answer>
user: Write a short story about a cat.
assistant: Once upon a time a cat found a ball of yarn. She played with it all day and was happy.
user: What is 2 + 2?
assistant: 2 + 2 = 4. The answer is 4.
system: You are a helpful assistant.
user: Say hello.
assistant: Hello! How can I help you today?
def add(a, b):
    return a + b

def is_even(n):
    return n % 2 == 0

for i in range(10):
    print(i, add(i, 1), is_even(i))
The numbers are 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 20 25 30 40 50 64 100 128 256 512 1000.
Café, naïve, jalapeño, 東京, Москва, 🙂: text in many scripts stays bytes the tokenizer can spell.
)corpus";
  return kText;
}

}  // namespace laminar::model
