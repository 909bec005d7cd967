// C++: new/delete and standard containers.
//   make_widgets: 100 x new Widget (48 bytes); drop_half deletes 50 of them.
//   a std::map<int, std::string> of 50 strings of 40 characters, and a growing std::vector<int>.
#include <map>
#include <string>
#include <vector>

struct Widget {
    char data[48];
};

static Widget *widgets[100];

__attribute__((noinline)) void make_widgets() {
    for (int i = 0; i < 100; i++) widgets[i] = new Widget();
}

__attribute__((noinline)) void drop_half() {
    for (int i = 0; i < 50; i++) delete widgets[i];
}

int main() {
    make_widgets();
    drop_half();
    std::map<int, std::string> names;
    for (int i = 0; i < 50; i++) names[i] = std::string(40, 'x');
    std::vector<int> grow;
    for (int i = 0; i < 1000; i++) grow.push_back(i);
    return static_cast<int>(names.size() + grow.size()) == 1050 ? 0 : 1;
}
